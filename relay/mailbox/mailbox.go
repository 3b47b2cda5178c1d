// Package mailbox watches an IMAP folder (go-imap/v2) for the mail that
// comes back after delivery, bounces and PEC receipts alike: it hands each
// new message to a handler, then moves it out of the way, and keeps its
// place in the outbox so that a restart neither reads a message twice nor
// skips one.
package mailbox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/internal/loopback"
)

// TLS modes of a mailbox connection.
const (
	TLSImplicit = "tls"      // IMAPS, port 993
	TLSStart    = "starttls" // STARTTLS, required, port 143
	TLSNone     = "none"     // plain: loopback only
)

// Config is one folder of one IMAP account.
type Config struct {
	// Name names the mailbox in logs, metrics and readiness.
	Name string
	// Addr is host:port.
	Addr       string
	TLS        string
	CAFile     string
	SkipVerify bool
	Username   string
	Password   string
	// Folder is watched; handled mail goes to Processed, mail that is not
	// for the relay to Unmatched. Without MOVE on the server, mail is
	// flagged instead and stays where it is.
	Folder    string
	Processed string
	Unmatched string
	// Poll is the interval between looks when the server lacks IDLE, and
	// the longest wait in IDLE.
	Poll time.Duration
	// Lease is how long this relay holds the mailbox before renewing: with
	// relays sharing a store, one at a time polls each mailbox.
	Lease time.Duration
	Owner string
}

// Verdict is where a handled message goes.
type Verdict int

const (
	Processed Verdict = iota // the relay recorded what it says
	Unmatched                // not for the relay, or about no message it knows
	// Later leaves the message, and the ones after it, for the next look
	// in a moment: it is about a message the relay is still sending (a
	// receipt can come before the relay records SENT).
	Later
)

// laterWait is how soon a message left for later is read again.
const laterWait = 2 * time.Second

// Handler reads one message. An error means the relay could not record it
// now (its store is down): the message stays and is read again later. A
// message the handler cannot understand is Unmatched, not an error, so that
// one bad message never blocks the mailbox.
type Handler interface {
	Handle(ctx context.Context, raw []byte) (Verdict, error)
}

// Cursors is what the poller needs of the outbox.
type Cursors interface {
	ClaimCursor(ctx context.Context, name, owner string, until time.Time) (backends.Cursor, error)
	SaveCursor(ctx context.Context, name, owner string, c backends.Cursor) error
}

// Keywords flag handled mail when the server cannot move it.
const (
	keywordProcessed imap.Flag = "$PostinoProcessed"
	keywordUnmatched imap.Flag = "$PostinoUnmatched"
)

// batch bounds the messages fetched at once, so that a full mailbox is
// worked through in steps that each leave the cursor further on.
const batch = 50

// Poller watches one mailbox.
type Poller struct {
	cfg     Config
	cursors Cursors
	handler Handler
	log     *slog.Logger
	metrics *Metrics
	key     string // the cursor's name

	mu    sync.Mutex
	state error // why the mailbox is not being watched; nil when it is
}

// errLater stops a batch at a message left for later.
var errLater = errors.New("left for later")

// errStarting is the state before the first session.
var errStarting = errors.New("not connected yet")

// New makes a poller; Run starts it.
func New(cfg Config, cursors Cursors, h Handler, log *slog.Logger, m *Metrics) *Poller {
	return &Poller{cfg: cfg, cursors: cursors, handler: h, log: log.With("mailbox", cfg.Name), metrics: m,
		key: fmt.Sprintf("imap://%s@%s/%s", cfg.Username, cfg.Addr, cfg.Folder), state: errStarting}
}

// Name is the mailbox's name.
func (p *Poller) Name() string { return p.cfg.Name }

// Ready says why the mailbox is not watched, or nil when it is (or when
// another relay sharing the store watches it).
func (p *Poller) Ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

func (p *Poller) setState(err error) {
	p.mu.Lock()
	p.state = err
	p.mu.Unlock()
	up := 0.0
	if err == nil {
		up = 1
	}
	p.metrics.up.WithLabelValues(p.cfg.Name).Set(up)
}

// Run watches the mailbox until ctx ends. Failures are logged with what to
// fix and retried with backoff; they never stop the relay.
func (p *Poller) Run(ctx context.Context) {
	retry := backoff.Schedule{First: time.Second, Max: 5 * time.Minute, Jitter: 0.2}
	failures := 0
	defer p.release()
	for ctx.Err() == nil {
		err := p.session(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := p.cfg.Lease / 2
		switch {
		case errors.Is(err, backends.ErrLockNotAcquired):
			// Another relay sharing the store watches it: stand by.
			p.setState(nil)
			failures = 0
		case err != nil:
			failures++
			wait = retry.Delay(failures)
			p.setState(err)
			p.metrics.errors.WithLabelValues(p.cfg.Name).Inc()
			p.log.Error("mailbox: cannot watch it; trying again", "error", err, "retry_in", wait.Round(time.Second))
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
	}
}

// session connects, then reads and waits until an error or ctx ends.
func (p *Poller) session(ctx context.Context) error {
	cur, err := p.claim(ctx)
	if err != nil {
		return err
	}
	news := make(chan struct{}, 1)
	c, err := p.dial(news)
	if err != nil {
		return err
	}
	defer c.Close()
	// Closing the connection is how ctx ends a command in flight.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()

	if err := c.Login(p.cfg.Username, p.cfg.Password).Wait(); err != nil {
		return fmt.Errorf("login as %s on %s refused: %w; check the username and the password (file or variable)", p.cfg.Username, p.cfg.Addr, err)
	}
	canMove := c.Caps().Has(imap.CapMove) || c.Caps().Has(imap.CapIMAP4rev2)
	if canMove {
		if err := p.ensureFolders(c); err != nil {
			return err
		}
	}
	sel, err := c.Select(p.cfg.Folder, nil).Wait()
	if err != nil {
		return fmt.Errorf("select folder %q on %s: %w; create it or fix the mailbox's folder", p.cfg.Folder, p.cfg.Addr, err)
	}
	if cur.UIDValidity != sel.UIDValidity {
		if cur.UIDValidity != 0 {
			p.log.Warn("mailbox: UIDVALIDITY changed; reading the folder again (what was already recorded is recognised)",
				"was", cur.UIDValidity, "now", sel.UIDValidity)
		}
		cur = backends.Cursor{UIDValidity: sel.UIDValidity}
	}
	p.setState(nil)
	p.log.Info("mailbox: watching", "folder", p.cfg.Folder, "idle", c.Caps().Has(imap.CapIdle), "move", canMove)
	renew := time.Now().Add(p.cfg.Lease / 2)
	for {
		later := false
		if err := p.read(ctx, c, &cur, canMove); errors.Is(err, errLater) {
			later = true
		} else if err != nil {
			return err
		}
		if time.Now().After(renew) {
			if _, err := p.claim(ctx); err != nil {
				return err
			}
			renew = time.Now().Add(p.cfg.Lease / 2)
		}
		wait := min(p.cfg.Poll, p.cfg.Lease/2)
		if later {
			wait = laterWait
		}
		if err := p.wait(ctx, c, news, wait); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// release lets another relay sharing the store take the mailbox at once
// instead of when the lease runs out.
func (p *Poller) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// A lease that ends now; refused, harmlessly, when another relay holds it.
	p.cursors.ClaimCursor(ctx, p.key, p.cfg.Owner, time.Now())
}

func (p *Poller) claim(ctx context.Context) (backends.Cursor, error) {
	cur, err := p.cursors.ClaimCursor(ctx, p.key, p.cfg.Owner, time.Now().Add(p.cfg.Lease))
	if err != nil && !errors.Is(err, backends.ErrLockNotAcquired) {
		return cur, fmt.Errorf("read the mailbox cursor from the outbox: %w", err)
	}
	return cur, err
}

func (p *Poller) dial(news chan struct{}) (*imapclient.Client, error) {
	opts := &imapclient.Options{
		Dialer: &net.Dialer{Timeout: 30 * time.Second},
		UnilateralDataHandler: &imapclient.UnilateralDataHandler{
			Mailbox: func(d *imapclient.UnilateralDataMailbox) {
				if d.NumMessages != nil {
					select {
					case news <- struct{}{}:
					default:
					}
				}
			},
		},
	}
	var c *imapclient.Client
	var err error
	switch p.cfg.TLS {
	case TLSImplicit, TLSStart:
		if opts.TLSConfig, err = p.tlsConfig(); err != nil {
			return nil, err
		}
		if p.cfg.TLS == TLSImplicit {
			c, err = imapclient.DialTLS(p.cfg.Addr, opts)
		} else {
			c, err = imapclient.DialStartTLS(p.cfg.Addr, opts)
		}
	default:
		c, err = imapclient.DialInsecure(p.cfg.Addr, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("connect to %s (tls %s): %w", p.cfg.Addr, p.cfg.TLS, err)
	}
	if err := c.WaitGreeting(); err != nil {
		c.Close()
		return nil, fmt.Errorf("greeting of %s: %w", p.cfg.Addr, err)
	}
	return c, nil
}

func (p *Poller) tlsConfig() (*tls.Config, error) {
	host, _, err := net.SplitHostPort(p.cfg.Addr)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{ServerName: host, InsecureSkipVerify: p.cfg.SkipVerify, MinVersion: tls.VersionTLS12}
	if p.cfg.CAFile != "" {
		pem, err := os.ReadFile(p.cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("mailbox %s: tls_ca_file: %w", p.cfg.Name, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("mailbox %s: tls_ca_file %s holds no PEM certificate", p.cfg.Name, p.cfg.CAFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// ensureFolders creates the folders handled mail goes to.
func (p *Poller) ensureFolders(c *imapclient.Client) error {
	list, err := c.List("", "*", nil).Collect()
	if err != nil {
		return fmt.Errorf("list folders on %s: %w", p.cfg.Addr, err)
	}
	have := map[string]bool{}
	for _, l := range list {
		have[l.Mailbox] = true
	}
	for _, f := range []string{p.cfg.Processed, p.cfg.Unmatched} {
		if have[f] {
			continue
		}
		if err := c.Create(f, nil).Wait(); err != nil {
			return fmt.Errorf("create folder %q on %s: %w; create it by hand or change the mailbox's folders", f, p.cfg.Addr, err)
		}
		have[f] = true
		p.log.Info("mailbox: created folder", "folder", f)
	}
	return nil
}

// read handles every message past the cursor, in UID order, saving the
// cursor after each.
func (p *Poller) read(ctx context.Context, c *imapclient.Client, cur *backends.Cursor, canMove bool) error {
	for {
		criteria := &imap.SearchCriteria{UID: []imap.UIDSet{{imap.UIDRange{Start: imap.UID(cur.LastUID + 1), Stop: 0}}}}
		if !canMove {
			criteria.NotFlag = []imap.Flag{keywordProcessed, keywordUnmatched}
		}
		data, err := c.UIDSearch(criteria, nil).Wait()
		if err != nil {
			return fmt.Errorf("search %s: %w", p.cfg.Folder, err)
		}
		var uids []imap.UID
		for _, uid := range data.AllUIDs() {
			// "n:*" always matches the last message, even below n.
			if uint32(uid) > cur.LastUID {
				uids = append(uids, uid)
			}
		}
		if len(uids) == 0 {
			return nil
		}
		for len(uids) > 0 {
			n := min(len(uids), batch)
			if err := p.readBatch(ctx, c, cur, uids[:n], canMove); err != nil {
				return err
			}
			uids = uids[n:]
		}
	}
}

func (p *Poller) readBatch(ctx context.Context, c *imapclient.Client, cur *backends.Cursor, uids []imap.UID, canMove bool) error {
	section := &imap.FetchItemBodySection{Peek: true}
	msgs, err := c.Fetch(imap.UIDSetNum(uids...), &imap.FetchOptions{UID: true, BodySection: []*imap.FetchItemBodySection{section}}).Collect()
	if err != nil {
		return fmt.Errorf("fetch from %s: %w", p.cfg.Folder, err)
	}
	byUID := map[imap.UID]*imapclient.FetchMessageBuffer{}
	for _, m := range msgs {
		byUID[m.UID] = m
	}
	for _, uid := range uids {
		m := byUID[uid]
		if m == nil {
			continue // expunged meanwhile
		}
		verdict, err := p.handler.Handle(ctx, m.FindBodySection(section))
		if err != nil {
			return fmt.Errorf("message UID %d left for later: %w", uid, err)
		}
		if verdict == Later {
			return errLater
		}
		if err := p.putAway(c, uid, verdict, canMove); err != nil {
			return err
		}
		name := "processed"
		if verdict == Unmatched {
			name = "unmatched"
		}
		p.metrics.messages.WithLabelValues(p.cfg.Name, name).Inc()
		cur.LastUID = uint32(uid)
		if err := p.cursors.SaveCursor(ctx, p.key, p.cfg.Owner, *cur); err != nil {
			return fmt.Errorf("save the mailbox cursor: %w", err)
		}
	}
	return nil
}

// putAway moves a handled message to its folder, or flags it where the
// server cannot move.
func (p *Poller) putAway(c *imapclient.Client, uid imap.UID, v Verdict, canMove bool) error {
	set := imap.UIDSetNum(uid)
	if canMove {
		folder := p.cfg.Processed
		if v == Unmatched {
			folder = p.cfg.Unmatched
		}
		if _, err := c.Move(set, folder).Wait(); err != nil {
			return fmt.Errorf("move UID %d to %s: %w", uid, folder, err)
		}
		return nil
	}
	kw := keywordProcessed
	if v == Unmatched {
		kw = keywordUnmatched
	}
	flags := []imap.Flag{imap.FlagSeen}
	if permanent := c.Mailbox().PermanentFlags; hasFlag(permanent, imap.FlagWildcard) || hasFlag(permanent, kw) {
		flags = append(flags, kw)
	}
	if err := c.Store(set, &imap.StoreFlags{Op: imap.StoreFlagsAdd, Silent: true, Flags: flags}, nil).Close(); err != nil {
		return fmt.Errorf("flag UID %d: %w", uid, err)
	}
	return nil
}

func hasFlag(flags []imap.Flag, f imap.Flag) bool {
	// Keywords are case-insensitive (RFC 3501 section 2.3.2).
	return slices.ContainsFunc(flags, func(g imap.Flag) bool { return strings.EqualFold(string(g), string(f)) })
}

// wait returns when new mail may be there: at once when the server said
// so, in IDLE when the server has it, or after the poll interval.
func (p *Poller) wait(ctx context.Context, c *imapclient.Client, news chan struct{}, d time.Duration) error {
	select {
	case <-news:
		return nil
	default:
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	if !c.Caps().Has(imap.CapIdle) {
		select {
		case <-ctx.Done():
		case <-timer.C:
		case <-c.Closed():
			return errors.New("the server closed the connection")
		}
		return nil
	}
	idle, err := c.Idle()
	if err != nil {
		return fmt.Errorf("IDLE: %w", err)
	}
	select {
	case <-ctx.Done():
	case <-news:
	case <-timer.C:
	case <-c.Closed():
	}
	if err := idle.Close(); err != nil {
		return fmt.Errorf("end IDLE: %w", err)
	}
	if err := idle.Wait(); err != nil {
		return fmt.Errorf("IDLE: %w", err)
	}
	return nil
}

// DefaultPort is the port of a TLS mode.
func DefaultPort(tlsMode string) int {
	if tlsMode == TLSImplicit {
		return 993
	}
	return 143
}

// CheckTLS refuses plain IMAP beyond loopback: the password would cross the
// network in clear.
func CheckTLS(mode, host string) error {
	switch mode {
	case TLSImplicit, TLSStart:
		return nil
	case TLSNone:
		if loopback.Host(host) {
			return nil
		}
		return fmt.Errorf("tls none is for loopback only, and %s is not: use tls (port 993) or starttls (port 143)", host)
	default:
		return fmt.Errorf("tls %q: use tls, starttls, or none (loopback only)", mode)
	}
}

// Addr joins a host and a port, the port of the TLS mode when 0.
func Addr(host string, port int, tlsMode string) string {
	if port == 0 {
		port = DefaultPort(tlsMode)
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}
