package intake

import (
	"net/netip"
	"sync"
	"time"

	"github.com/emersion/go-smtp"
)

// AuthLimits bound password guessing. A zero field turns its limit off;
// the relay's configuration gives each a default.
type AuthLimits struct {
	// Delay holds back the reply to a failed AUTH. It doubles with each
	// failure of the same client address within Window (of the same
	// session, for a client of the allowed networks), up to MaxDelay (0:
	// it does not grow), so that guessing costs the guesser time while a
	// typo costs little.
	Delay    time.Duration
	MaxDelay time.Duration
	// PerSession failures end the session: the last is answered 421 4.7.0
	// and the connection closed.
	PerSession int
	// PerClient failures from one client address within Window refuse
	// AUTH from that address (421 4.7.0, then the connection closed) until
	// Window has passed since its first failure. An IPv6 client counts by
	// its /64, which one machine usually has whole. Clients of the allowed
	// networks are not counted: they may send without AUTH, and one app
	// with a stale password must not lock out the others on its host.
	PerClient int
	Window    time.Duration
	// Clients bounds the addresses remembered at once, so that an attacker
	// with many addresses cannot grow the table without end: when it is
	// full, expired entries go first, then an arbitrary one.
	Clients int
}

// authLimiter counts AUTH failures by client address. It lives in the
// Server; nothing of it is shared between servers.
type authLimiter struct {
	lim AuthLimits
	mu  sync.Mutex
	// failures are the addresses that failed within their window.
	failures map[netip.Prefix]*authFailures
}

type authFailures struct {
	since time.Time // the first failure of the window
	count int
}

func newAuthLimiter(lim AuthLimits) *authLimiter {
	return &authLimiter{lim: lim, failures: make(map[netip.Prefix]*authFailures)}
}

// clientKey is what failures are counted by: the address, or its /64 for
// IPv6.
func clientKey(ip netip.Addr) netip.Prefix {
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

// current returns the live entry of key, dropping an expired one. The
// caller holds mu.
func (l *authLimiter) current(key netip.Prefix, now time.Time) *authFailures {
	f := l.failures[key]
	if f != nil && l.lim.Window > 0 && now.Sub(f.since) >= l.lim.Window {
		delete(l.failures, key)
		return nil
	}
	return f
}

// blocked reports whether ip is over its limit, and until when.
func (l *authLimiter) blocked(ip netip.Addr, now time.Time) (time.Time, bool) {
	if l.lim.PerClient <= 0 {
		return time.Time{}, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.current(clientKey(ip), now)
	if f == nil || f.count < l.lim.PerClient {
		return time.Time{}, false
	}
	return f.since.Add(l.lim.Window), true
}

// fail records a failure of ip and returns how many it has had within its
// window, this one included.
func (l *authLimiter) fail(ip netip.Addr, now time.Time) int {
	if l.lim.PerClient <= 0 && l.lim.Delay <= 0 {
		return 1
	}
	key := clientKey(ip)
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.current(key, now)
	if f == nil {
		l.makeRoom(now)
		f = &authFailures{since: now}
		l.failures[key] = f
	}
	f.count++
	return f.count
}

// makeRoom drops an entry when the table is full. The caller holds mu. A
// few entries, in map order (which is random), are looked at: the expired
// among them go, or else the oldest not blocked, or else the oldest. An
// attacker with many addresses can push others out that way, but hardly
// its own blocked one; memory stays bounded and the cost of an insertion
// does not grow with the table.
func (l *authLimiter) makeRoom(now time.Time) {
	if l.lim.Clients <= 0 || len(l.failures) < l.lim.Clients {
		return
	}
	var oldest netip.Prefix
	var since time.Time
	oldestBlocked, seen := true, 0
	for key, f := range l.failures {
		if l.current(key, now) == nil {
			continue // expired, and dropped
		}
		blocked := l.lim.PerClient > 0 && f.count >= l.lim.PerClient
		if seen == 0 || oldestBlocked && !blocked || blocked == oldestBlocked && f.since.Before(since) {
			oldest, since, oldestBlocked = key, f.since, blocked
		}
		if seen++; seen == 8 {
			break
		}
	}
	if len(l.failures) >= l.lim.Clients {
		delete(l.failures, oldest)
	}
}

// delay is how long the reply to the n-th failure of a client waits.
func (l *authLimiter) delay(n int) time.Duration {
	d := l.lim.Delay
	for i := 1; i < n && d < l.lim.MaxDelay; i++ {
		d *= 2
	}
	if l.lim.MaxDelay > 0 {
		d = min(d, l.lim.MaxDelay)
	}
	return d
}

// tracked is how many client addresses the table holds; an expired entry
// goes when its address fails again or the table makes room. Counting
// only the live ones would walk the table at each failure, in the flood
// it guards against.
func (l *authLimiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.failures)
}

// authAllowed refuses AUTH to a session that is closing, and to a client
// address over its limit, whose session then closes.
func (s *session) authAllowed(now time.Time) error {
	if s.closing {
		return tooManyFailures("in this session: closing the connection")
	}
	if s.trusted {
		return nil
	}
	until, blocked := s.srv.auth.blocked(s.clientIP, now)
	if !blocked {
		return nil
	}
	s.srv.metrics.authLimited.WithLabelValues("client").Inc()
	s.hangUp()
	return tooManyFailures("from your address: try again after " + until.UTC().Format(time.RFC3339))
}

// authFailed answers a wrong password, once the delay its client has
// earned has passed. The first failure of a client in its window is
// logged, and the one that reaches its limit; those in between are only
// counted, so that a guesser does not flood the log.
func (s *session) authFailed(user string) error {
	now := time.Now()
	l := s.srv.auth
	s.failures++
	n := s.failures
	if !s.trusted {
		n = l.fail(s.clientIP, now)
	}
	s.srv.metrics.rejected("auth")
	s.srv.metrics.authClients.Set(float64(l.tracked()))
	overClient := !s.trusted && l.lim.PerClient > 0 && n >= l.lim.PerClient
	switch {
	case n == 1:
		s.srv.log.Warn("authentication failed", "client", s.clientIP, "user", user)
	case overClient && n == l.lim.PerClient:
		s.srv.log.Warn("authentication failures from a client reached the limit: AUTH from its address is refused for a while",
			"client", s.clientIP, "user", user, "failures", n, "window", l.lim.Window)
	}
	// The session's own goroutine waits: a guesser holds no more than
	// its session, and its next guess waits for this reply.
	time.Sleep(l.delay(n))
	switch {
	case overClient:
		s.srv.metrics.authLimited.WithLabelValues("client").Inc()
		s.hangUp()
		return tooManyFailures("from your address: closing the connection")
	case l.lim.PerSession > 0 && s.failures >= l.lim.PerSession:
		s.srv.metrics.authLimited.WithLabelValues("session").Inc()
		s.hangUp()
		return tooManyFailures("in this session: closing the connection")
	}
	return errAuthFailed()
}

func tooManyFailures(what string) error {
	return &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 7, 0}, Message: "Too many failed authentications " + what}
}

// hangUp ends the session after this reply: go-smtp goes on until the
// client leaves, so the connection tells it the client has, once the
// reply is sent. Commands the client had already sent are still answered
// (AUTH among them with a 421, as closing says).
func (s *session) hangUp() {
	s.closing = true
	if rc, ok := connUnder[*replyConn](s.conn.Conn()); ok {
		rc.hangUp()
	}
}
