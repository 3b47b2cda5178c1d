package intake

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
)

// refusalLogEvery spaces the log lines about refused sessions: a flood of
// connections must not become a flood of log lines (the metric counts
// each).
const refusalLogEvery = 10 * time.Second

// sessionLimits counts the open sessions, in all and by client address (an
// IPv6 client by its /64, as clientKey says).
// Clients of the allowed networks (the apps) are exempt from the
// per-client cap and alone may take the reserved sessions, so that a noisy
// client, or many, cannot lock the apps out.
type sessionLimits struct {
	max, perClient, reserved int
	log                      *slog.Logger
	metrics                  *Metrics

	mu       sync.Mutex
	open     int
	byClient map[netip.Prefix]int
	// unlogged counts the refusals since the last log line.
	unlogged int
	loggedAt time.Time
}

// take counts a new session of ip, or says which limit refuses it.
func (l *sessionLimits) take(ip netip.Addr, trusted bool, now time.Time) (refusal string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.max > 0 && l.open >= l.max:
		refusal = "busy"
	case l.max > 0 && !trusted && l.open >= l.max-l.reserved:
		// The rest of the sessions are kept for the apps.
		refusal = "busy"
	case l.perClient > 0 && !trusted && l.byClient[clientKey(ip)] >= l.perClient:
		refusal = "client_busy"
	}
	if refusal != "" {
		l.refused(ip, refusal, now)
		return refusal
	}
	l.open++
	l.byClient[clientKey(ip)]++
	l.metrics.sessions.Set(float64(l.open))
	return ""
}

// refused counts a refusal and logs it, once per refusalLogEvery.
func (l *sessionLimits) refused(ip netip.Addr, reason string, now time.Time) {
	l.metrics.rejected(reason)
	l.unlogged++
	if now.Sub(l.loggedAt) < refusalLogEvery {
		return
	}
	l.log.Warn("sessions refused with 421: a limit on sessions is reached (smtp.max_sessions, smtp.max_sessions_per_client)",
		"refused", l.unlogged, "client", ip, "limit", reason, "open", l.open, "of_client", l.byClient[clientKey(ip)])
	l.unlogged, l.loggedAt = 0, now
}

func (l *sessionLimits) release(ip netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	key := clientKey(ip)
	if l.byClient[key]--; l.byClient[key] <= 0 {
		delete(l.byClient, key)
	}
	l.metrics.sessions.Set(float64(l.open))
}

// limitListener answers 421 to a client over a limit and hands go-smtp
// only the sessions within them, so that a flood of connections never
// exhausts the process's file handles and a new client never waits in
// silence.
type limitListener struct {
	net.Listener
	srv *Server
}

func (l limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := clientIP(c.RemoteAddr())
		if refusal := l.srv.limits.take(ip, l.srv.trusted(ip), time.Now()); refusal != "" {
			l.srv.refuse(c, refusal)
			continue
		}
		return &limitConn{Conn: c, srv: l.srv, ip: ip}, nil
	}
}

// refuse answers 421 and closes c, which sends it (replyConn). The reply
// fits in the empty send buffer of a new connection, so sending it never
// waits for the client and does not hold up the accept loop.
func (s *Server) refuse(c net.Conn, refusal string) {
	msg := "Too many sessions open, try again later"
	if refusal == "client_busy" {
		msg = "Too many sessions open from your address, try again later"
	}
	fmt.Fprintf(c, "421 4.7.0 %s %s\r\n", s.cfg.Hostname, msg)
	c.Close()
}

// limitConn is one counted session. It bounds a transaction in time: from
// MAIL on, no read waits past the transaction's deadline, and during DATA
// (or BDAT) the data must keep arriving at the minimum rate. go-smtp
// resets the read deadline before each command and never during DATA, so
// the deadlines are kept here, where every read passes.
type limitConn struct {
	net.Conn
	srv  *Server
	ip   netip.Addr
	once sync.Once

	mu sync.Mutex
	// txEnd is the deadline of the transaction in progress, or zero.
	txEnd time.Time
	// dataStart is when the data of the transaction began, or zero;
	// dataBytes counts the bytes read since, as they came (TLS records
	// included): what the message's reader has is counted only once a
	// buffer is full.
	dataStart time.Time
	dataBytes int64
	// failed says a read of the data failed or met the end of the
	// stream: go-smtp's BDAT takes a chunk cut short for a whole one
	// (io.Copy of a LimitReader ends without an error), so the session
	// must not record what it got (broken).
	failed bool
	// cut is the reply to the transaction the limits ended; every read
	// after it ends the session.
	cut *smtp.SMTPError
}

// connUnder finds the connection of type T under c: go-smtp hands the
// session the TLS connection after STARTTLS, over a limitConn over a
// replyConn.
func connUnder[T net.Conn](c net.Conn) (T, bool) {
	for {
		if v, ok := c.(T); ok {
			return v, true
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			var none T
			return none, false
		}
		c = u.NetConn()
	}
}

// NetConn returns the connection under c, as tls.Conn's does.
func (c *limitConn) NetConn() net.Conn { return c.Conn }

func (c *limitConn) Close() error {
	c.once.Do(func() { c.srv.limits.release(c.ip) })
	if c.reply() != nil {
		c.linger()
	}
	return c.Conn.Close()
}

// cutLinger is how long a cut session's client has to read the 421.
const cutLinger = time.Second

// linger sends the last reply and reads what the client still sends, for
// a while, before the close: a connection closed with bytes unread is
// reset, and the reset can overtake the reply in the client's kernel.
//
// The write deadline is set again first: a TLS connection's Close sets it
// to now, to fail later writes, before it closes this connection, and the
// 421 it left held (replyConn) would be dropped under it.
func (c *limitConn) linger() {
	c.Conn.SetWriteDeadline(time.Now().Add(cutLinger))
	c.Conn.SetReadDeadline(time.Now().Add(cutLinger))
	// The reply goes out before the first read (replyConn).
	io.Copy(io.Discard, c.Conn)
}

// beginTransaction starts the transaction's clock (at MAIL).
func (c *limitConn) beginTransaction(now time.Time) {
	if c == nil || c.srv.cfg.TransactionTimeout <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.txEnd.IsZero() {
		c.txEnd = now.Add(c.srv.cfg.TransactionTimeout)
		c.dataBytes = 0
	}
}

// beginData starts the clock of the data rate. The bytes are counted from
// MAIL on: with BDAT, go-smtp reads the first chunk before the session's
// Data is called.
func (c *limitConn) beginData(now time.Time) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dataStart = now
}

// endTransaction stops the clocks (after DATA, at RSET).
func (c *limitConn) endTransaction() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.txEnd, c.dataStart, c.dataBytes, c.failed = time.Time{}, time.Time{}, 0, false
}

// broken reports whether the data of the transaction may be incomplete:
// the limits cut it, or a read of it failed.
func (c *limitConn) broken() bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut != nil || c.failed
}

// reply is the reply to a transaction the limits cut, or nil.
func (c *limitConn) reply() *smtp.SMTPError {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut
}

// SetReadDeadline keeps go-smtp's deadline for the next command within the
// transaction's.
func (c *limitConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	if !c.txEnd.IsZero() && (t.IsZero() || t.After(c.txEnd)) {
		t = c.txEnd
	}
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *limitConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.cut != nil {
		c.mu.Unlock()
		return 0, io.EOF
	}
	inData := !c.dataStart.IsZero()
	if inData {
		if err := c.Conn.SetReadDeadline(c.dataDeadline(time.Now())); err != nil {
			c.mu.Unlock()
			return 0, err
		}
	}
	c.mu.Unlock()

	n, err := c.Conn.Read(p)
	if ne, ok := errors.AsType[net.Error](err); !ok || !ne.Timeout() {
		c.mu.Lock()
		c.dataBytes += int64(n)
		// Not only in data: with BDAT, go-smtp reads a chunk while the
		// session's Data, which starts the data's clock, is starting.
		c.failed = c.failed || err != nil
		c.mu.Unlock()
		return n, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.txEnd.IsZero() && c.dataStart.IsZero() {
		// An idle session between transactions: go-smtp says so.
		return n, err
	}
	c.cut = c.cutReply(time.Now())
	c.srv.log.Info("transaction cut", "client", c.ip, "reason", c.cut.Message)
	if !inData {
		// Between commands, go-smtp answers a timeout with 421 itself.
		return n, err
	}
	// The session replies with the cut (reply); an end of file, unlike
	// an error, is what TLS passes on and go-smtp then closes on quietly.
	return n, io.EOF
}

// dataDeadline is the earliest of: the read timeout from now, the time by
// which the data so far should have arrived at the minimum rate, and the
// transaction's deadline.
func (c *limitConn) dataDeadline(now time.Time) time.Time {
	d := time.Time{}
	for _, t := range []time.Time{c.idleDeadline(now), c.rateDeadline(), c.txDeadline()} {
		if !t.IsZero() && (d.IsZero() || t.Before(d)) {
			d = t
		}
	}
	return d
}

func (c *limitConn) idleDeadline(now time.Time) time.Time {
	if c.srv.cfg.ReadTimeout <= 0 {
		return time.Time{}
	}
	return now.Add(c.srv.cfg.ReadTimeout)
}

// rateDeadline is when the data so far should have arrived at the minimum
// rate, after a read timeout's grace (as Postfix's smtpd_min_data_rate),
// or zero without a minimum.
func (c *limitConn) rateDeadline() time.Time {
	cfg := &c.srv.cfg
	if cfg.MinDataRate <= 0 || c.dataStart.IsZero() {
		return time.Time{}
	}
	return c.dataStart.Add(cfg.ReadTimeout + c.credit())
}

// credit is the time the data so far may take at the minimum rate.
func (c *limitConn) credit() time.Duration {
	if rate := c.srv.cfg.MinDataRate; rate > 0 {
		return time.Duration(float64(c.dataBytes) / float64(rate) * float64(time.Second))
	}
	return 0
}

// txDeadline is the transaction's deadline, moved on by the time its data
// may take at the minimum rate: a large message from a slow but steady
// client is not cut by a deadline it could never have met.
func (c *limitConn) txDeadline() time.Time {
	if c.txEnd.IsZero() {
		return c.txEnd
	}
	return c.txEnd.Add(c.credit())
}

// cutReply says which limit ended the transaction.
func (c *limitConn) cutReply(now time.Time) *smtp.SMTPError {
	cfg := &c.srv.cfg
	msg := fmt.Sprintf("No data for %s, closing", cfg.ReadTimeout)
	if rate := c.rateDeadline(); !rate.IsZero() && !now.Before(rate) {
		msg = fmt.Sprintf("Data arrived too slowly (%d bytes in %s; this relay needs %d bytes per second), closing",
			c.dataBytes, now.Sub(c.dataStart).Round(time.Millisecond), cfg.MinDataRate)
	}
	if tx := c.txDeadline(); !tx.IsZero() && !now.Before(tx) {
		msg = fmt.Sprintf("The transaction took longer than the %s this relay allows from MAIL to the end of the data", cfg.TransactionTimeout)
		if cfg.MinDataRate > 0 {
			msg += fmt.Sprintf(" (and the time the data needs at %d bytes per second)", cfg.MinDataRate)
		}
		msg += ", closing"
	}
	return &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 4, 2}, Message: msg}
}

// clientIP is the client's address, IPv4 as such also on an IPv6 socket.
func clientIP(a net.Addr) netip.Addr {
	ap, _ := netip.ParseAddrPort(a.String())
	return ap.Addr().Unmap()
}
