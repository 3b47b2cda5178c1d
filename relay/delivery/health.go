package delivery

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// routeHealth says whether a route's upstream takes connections. Each
// message's deferral is logged on its own; this is the one signal that the
// route as a whole is down: a WARN when it goes down and when it comes
// back, postino_route_up, and /readyz degraded meanwhile.
//
// A connection attempt is everything before the first MAIL of a session:
// the name's lookup (an MX route's MX and address lookups), the TCP
// connect, the TLS handshake (implicit, or STARTTLS when the route
// requires it), the greeting, EHLO and AUTH. It fails when no session
// ready for MAIL comes of it: refused, unreachable, timed out, a handshake
// or certificate refused, a greeting other than 2xx (421, 554), EHLO or
// AUTH refused. An MX route's verdict on a domain (null MX, no such
// domain) says nothing of the upstream and does not count, nor does an
// attempt cut short by the shutdown. Replies to MAIL, RCPT and DATA are
// the message's, not the route's.
//
// The route is down once its last `after` attempts all failed, and up
// again when a session opens, or one already open carries a message and
// stays usable (a smarthost that limits our connections still delivers
// over those it took). An MX route has many upstreams, and one site
// whose hosts are all down is that site's trouble (site.connectFailed
// marks the site itself down): the route is down only when the failures
// in a row reached two sites at least (a domain whose site is not known
// yet counts as its own), which is more likely the relay's own network
// (port 25 blocked, DNS down) than theirs.
type routeHealth struct {
	route *Route
	after int
	log   *slog.Logger
	gauge prometheus.Gauge

	mu        sync.Mutex
	failed    int    // connection attempts failed in a row
	domain    string // MX: the site (or domain) of the first of them
	domains   bool   // MX: they reached a second site
	last      error
	downSince time.Time // zero while up
}

// newHealth follows every route of rs, each up at first.
func newHealth(rs *Routes, after int, log *slog.Logger, m *Metrics) map[string]*routeHealth {
	out := make(map[string]*routeHealth, len(rs.byName))
	for name, r := range rs.byName {
		h := &routeHealth{route: r, after: after, log: log, gauge: m.routeUp.WithLabelValues(name)}
		h.gauge.Set(1)
		out[name] = h
	}
	return out
}

// failure counts a connection attempt that failed; domain is the
// recipients' domain on an MX route.
func (h *routeHealth) failure(domain string, err error) {
	h.mu.Lock()
	h.failed++
	h.last = err
	switch {
	case h.failed == 1:
		h.domain = domain
	case domain != h.domain:
		h.domains = true
	}
	down := h.downSince.IsZero() && h.failed >= h.after && (!h.route.MX() || h.domains)
	if down {
		h.downSince = time.Now()
	}
	n := h.failed
	h.mu.Unlock()
	if !down {
		return
	}
	h.gauge.Set(0)
	h.log.Warn("delivery: route down: its upstream takes no connection; its mail waits in READY and is tried again",
		h.attrs("failed_attempts", n, "error", err)...)
}

// success notes that the route's upstream took a session.
func (h *routeHealth) success() {
	h.mu.Lock()
	since, n := h.downSince, h.failed
	h.failed, h.domain, h.domains, h.last, h.downSince = 0, "", false, nil, time.Time{}
	h.mu.Unlock()
	if since.IsZero() {
		return
	}
	h.gauge.Set(1)
	h.log.Warn("delivery: route up again: its upstream took a session",
		h.attrs("down_for", time.Since(since).Round(time.Millisecond), "failed_attempts", n)...)
}

// attrs are a log line's attributes: the route, its upstream, and more.
func (h *routeHealth) attrs(more ...any) []any {
	args := []any{"route", h.route.Name, "smarthost", h.route.Smarthost}
	if h.route.MX() {
		args = []any{"route", h.route.Name, "upstream", "MX hosts"}
	}
	return append(args, more...)
}

// err says why the route is down, or is nil while it is up.
func (h *routeHealth) err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.downSince.IsZero() {
		return nil
	}
	since := h.downSince.UTC().Format(time.RFC3339)
	if h.route.MX() {
		return fmt.Errorf("down since %s: the last %d connection attempts to the MX hosts of its recipients' domains failed, the last: %v; "+
			"its mail waits in READY: check that the relay can reach port %d of hosts outside and resolve their names", since, h.failed, h.last, h.route.MXPort)
	}
	return fmt.Errorf("down since %s: the last %d connection attempts to smarthost %s failed, the last: %v; "+
		"its mail waits in READY: check that the smarthost runs and takes the relay's connections", since, h.failed, h.route.Smarthost, h.last)
}
