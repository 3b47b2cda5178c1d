package delivery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/internal/testrig/dnstest"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/internal/testrig/postfixtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay/bounce"
	"github.com/genropy/postino/relay/delivery/sites"
	"github.com/genropy/postino/relay/resolver"
	"github.com/genropy/postino/spool"
)

// TestSites is the fleet: messages to 40 domains on 4 sites, each site's
// MX host a real server on its own loopback address, found through a real
// DNS server. One site throttles above 2 sessions with 421 4.7.0, one is
// down, one is slow, one is fast. Every message is delivered exactly once
// but the dead site's; after the first 421 the throttling site never sees
// more sessions than its rule's plus one; the dead site gets one probe per
// interval, not a connection per message; and the fast site is done while
// the slow one still has mail to take, its excess handed back.
func TestSites(t *testing.T) {
	n := 2000
	if s := os.Getenv("TEST_POSTINO_SITES_MESSAGES"); s != "" {
		n, _ = strconv.Atoi(s) // 10000 for the figure
	}
	ips := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
	port := smtptest.SharedPort(t, ips...)
	at := func(ip string) string { return ip + ":" + strconv.Itoa(port) }
	throttler := smtptest.Start(t, smtptest.Options{Addr: at(ips[0]), MaxSessions: 2})
	dead := smtptest.Start(t, smtptest.Options{Addr: at(ips[1]), Down: true})
	slow := smtptest.Start(t, smtptest.Options{Addr: at(ips[2])})
	slow.Hang(10 * time.Millisecond)
	fast := smtptest.Start(t, smtptest.Options{Addr: at(ips[3])})
	names := []string{"throttle", "dead", "slow", "fast"}
	records := []string{". IN NS a.root.test."}
	for k, name := range names {
		records = append(records, fmt.Sprintf("mx.%s.test. IN A %s", name, ips[k]))
		for i := range 10 {
			records = append(records, fmt.Sprintf("d%d.%s.example. IN MX 10 mx.%s.test.", i, name, name))
		}
	}
	dns := dnstest.Start(t, dnstest.Zone{Records: records})

	const probe = 500 * time.Millisecond
	rules, err := sites.Load([]byte(`
default:
  messages_per_session: 1000
  connections_per_minute: 60000
  max_queued: 100
adapt:
  cooldown: 200ms
down:
  probe: 500ms
  probe_max: 500ms
providers:
  - name: throttler
    mx: [mx.throttle.test]
    sessions: 3
  - name: slow
    mx: [mx.slow.test]
    sessions: 1
`), 10)
	if err != nil {
		t.Fatal(err)
	}
	sp, store := outboxtest.Open(t)
	addToSites(t, sp, store, n, names)
	e := mxEngine(t, Config{MaxInFlight: 256, MXConnections: 10, Lease: time.Minute, Owner: "test", Sites: rules}, store, sp, port, dns)
	start := time.Now()
	stop := runUntilStopped(e)
	defer stop()

	perSite := n / len(names)
	waitFor(t, "the fast site's mail", func() bool { return len(fast.Messages()) >= perSite })
	if got := len(slow.Messages()); got >= perSite {
		t.Errorf("the slow site had all its %d messages when the fast site had all of its: it held the fast one back", got)
	}
	// Its excess went back to the outbox rather than hold the slots.
	if back := testutil.ToFloat64(e.metrics.siteHandedBack.WithLabelValues("slow")); back == 0 {
		t.Error("the slow site handed nothing back: it held every message it was given")
	}
	waitFor(t, "every message but the dead site's", func() bool {
		return len(throttler.Messages())+len(slow.Messages())+len(fast.Messages()) >= 3*perSite
	})
	elapsed := time.Since(start)
	stop()
	t.Logf("%d messages to 40 domains on 4 sites: %s", n, elapsed)

	seen := map[string]int{}
	for _, up := range []*smtptest.Server{throttler, slow, fast} {
		for _, m := range up.Messages() {
			seen[m.Header("X-Genro-Mail-ID")]++
		}
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s was delivered %d times", id, k)
		}
	}
	if len(seen) != 3*perSite {
		t.Errorf("%d messages delivered, want %d", len(seen), 3*perSite)
	}
	refused, most := 0, 0
	for _, c := range throttler.Accepted() {
		if refused > 0 {
			most = max(most, c.Open)
		}
		if c.Refused {
			refused++
		}
	}
	if refused == 0 {
		t.Error("the throttling site never refused a session: the test throttled nothing")
	}
	if most > 3+1 {
		t.Errorf("after its first 421 the throttling site saw %d sessions at once, its rule's 3 plus one at most", most)
	}
	probes := len(dead.Accepted())
	// Before it is known down, its sessions (10 at once) may all try.
	if limit := 10 + int(elapsed/probe) + 2; probes > limit {
		t.Errorf("the dead site got %d connections in %s: more than one probe per %s after its first sessions", probes, elapsed, probe)
	}
	t.Logf("throttling site: %d sessions refused, at most %d at once after the first refusal; dead site: %d connections for %d messages",
		refused, most, probes, perSite)
}

// addToSites puts n READY messages in the outbox, each to one of ten
// domains of each site in turn.
func addToSites(t *testing.T, sp *spool.Spool, store readyStore, n int, names []string) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				id := fmt.Sprintf("m%d", i)
				rcpt := fmt.Sprintf("u%d@d%d.%s.example", i, i/len(names)%10, names[i%len(names)])
				outboxtest.Add(t, sp, store, &backends.Message{ID: id, Priority: 2,
					Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{rcpt}}},
					[]byte("From: app@example.com\r\nX-Genro-Mail-ID: "+id+"\r\nSubject: hi\r\n\r\nhello\r\n"))
				for _, tr := range []backends.Transition{
					{ID: id, From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: time.Now().Add(time.Minute)},
					{ID: id, From: backends.StatusIntaking, To: backends.StatusReady, Route: DefaultRoute},
				} {
					if err := store.Transition(ctx, tr); err != nil {
						t.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// mxEngine is an engine of MX delivery to MX hosts on port, found
// through the DNS server dns, with cfg's settings over the tests'.
func mxEngine(t *testing.T, cfg Config, store Store, sp *spool.Spool, port int, dns *dnstest.Server) *Engine {
	t.Helper()
	routes, err := NewRoutes([]Route{{Name: DefaultRoute, MaxConnections: 1, MXPort: port, TLS: TLSNone}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Poll, cfg.IdleTimeout, cfg.ShutdownTimeout, cfg.Timeouts = 50*time.Millisecond, time.Second, time.Second, DefaultTimeouts()
	cfg.DownAfter, cfg.ConfirmAfter, cfg.HeloName, cfg.Acknowledge, cfg.SiteMetrics = 3, time.Minute, "relay.test", true, 10
	cfg.Retry = Retry{Schedule: backoff.Schedule{First: 200 * time.Millisecond, Max: time.Second}, MaxAge: time.Hour}
	return NewEngine(cfg, store, sp, routes, resolver.New([]string{dns.Addr}, resolver.Options{Timeout: 5 * time.Second}),
		slog.New(slog.NewTextHandler(io.Discard, nil)), NewMetrics(prometheus.NewRegistry()), nil)
}

// readyStore is the part of an outbox that addToSites needs.
type readyStore interface {
	outboxtest.Creator
	Transition(ctx context.Context, t backends.Transition) error
}

// waitFor waits for done, generously.
func waitFor(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 3 minutes", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestThrottlingReplies: 421 and 4.7.x are throttling signals, and never
// count against the address; a block rule's reply is the site's refusal
// of the relay (bounce's reason blocked, a soft verdict).
func TestThrottlingReplies(t *testing.T) {
	for _, tt := range []struct {
		rep      Reply
		throttle bool
	}{
		{Reply{Code: 421, Enhanced: "4.7.0", Text: "Try again later"}, true},
		{Reply{Code: 421, Text: "Service not available"}, true},
		{Reply{Code: 450, Enhanced: "4.7.28", Text: "rate limited"}, true},
		{Reply{Code: 451, Enhanced: "4.7.1", Text: "reputation"}, true},
		{Reply{Code: 452, Enhanced: "4.2.2", Text: "mailbox full"}, false},
		{Reply{Code: 550, Enhanced: "5.7.1", Text: "refused"}, false},
		{Reply{Code: 250, Text: "ok"}, false},
	} {
		if got := throttling(tt.rep); got != tt.throttle {
			t.Errorf("%s: throttling %v, want %v", tt.rep, got, tt.throttle)
		}
		if tt.rep.Code/100 == 4 {
			if v := tt.rep.addressVerdict(); v != "soft" {
				t.Errorf("%s: verdict %s: a temporary refusal never counts against the address", tt.rep, v)
			}
		}
	}
	s3150 := Reply{Code: 550, Enhanced: "5.7.606", Text: "Access denied, banned sending IP [192.0.2.1]. (S3150)"}
	v, reason := bounce.Classify(bounce.Failure{Status: s3150.Enhanced, Code: s3150.Code, Text: s3150.Text})
	if v != "soft" || reason != bounce.ReasonBlocked {
		t.Errorf("S3150: %s %s, want soft blocked", v, reason)
	}
}

// TestSessionCarriesDomains: a session to a site carries the mail of
// every domain whose MX hosts include its host, with the same TLS plan,
// as one session to a provider carries mail for many of its domains; a
// domain whose plan differs gets a session of its own.
func TestSessionCarriesDomains(t *testing.T) {
	port := smtptest.SharedPort(t, "127.0.0.2")
	mx := smtptest.Start(t, smtptest.Options{Addr: "127.0.0.2:" + strconv.Itoa(port)})
	rules, err := sites.Load([]byte(`
default:
  messages_per_session: 1000
  connections_per_minute: 60000
providers:
  - name: fleet
    mx: [mx.fleet.test]
    sessions: 1
`), 10)
	if err != nil {
		t.Fatal(err)
	}
	sp, store := outboxtest.Open(t)
	const n = 200
	addToSites(t, sp, store, n, []string{"fleet"}) // ten domains, in turn
	policies, err := NewTLSPolicies(map[string]string{"d9.fleet.example": TLSOpportunistic}, "")
	if err != nil {
		t.Fatal(err)
	}
	e := mxEngine(t, Config{MaxInFlight: 256, MXConnections: 10, Lease: time.Minute, Owner: "test", Sites: rules, TLSPolicies: policies},
		store, sp, port, fleetDNS(t))
	defer runUntilStopped(e)()
	waitFor(t, "every message", func() bool { return len(mx.Messages()) >= n })
	// d9's plan is opportunistic, the others' none: at least one session
	// each, and a switch between them is a new session; one left idle may
	// end and another open. A session a domain would make ten.
	if got := len(mx.Accepted()); got < 2 || got > 5 {
		t.Errorf("%d sessions carried %d messages to ten domains on one site, one at a time: want 2 to 5, not one a domain", got, n)
	}
}

// TestSitePostfix: a private Postfix is the MX host of a site's ten
// domains, on 127.0.0.6, found through DNS: it takes every message.
func TestSitePostfix(t *testing.T) {
	port := smtptest.SharedPort(t, "127.0.0.6")
	var local []string
	records := []string{". IN NS a.root.test.", "mx.pf.test. IN A 127.0.0.6"}
	for i := range 10 {
		local = append(local, fmt.Sprintf("d%d.pf.example", i))
		records = append(records, fmt.Sprintf("d%d.pf.example. IN MX 10 mx.pf.test.", i))
	}
	pf := postfixtest.Start(t, postfixtest.Options{Addr: "127.0.0.6:" + strconv.Itoa(port), Local: strings.Join(local, ", ")})
	sp, store := outboxtest.Open(t)
	const n = 30
	addToSites(t, sp, store, n, []string{"pf"})
	e := mxEngine(t, Config{MaxInFlight: 64, MXConnections: 4, Lease: time.Minute, Owner: "test", Sites: sites.Shipped(4)},
		store, sp, port, dnstest.Start(t, dnstest.Zone{Records: records}))
	defer runUntilStopped(e)()
	waitFor(t, "every message sent", func() bool {
		for i := range n {
			m, err := store.Get(context.Background(), fmt.Sprintf("m%d", i))
			if err != nil || m.Status != backends.StatusSentAcknowledged {
				return false
			}
		}
		return true
	})
	for i := range n {
		// local(8) bounces the users it has no account for: taken first.
		if rcpt := fmt.Sprintf("u%d@d%d.pf.example", i, i%10); len(pf.Deliveries(rcpt)) == 0 {
			t.Errorf("Postfix never took %s:\n%s", rcpt, pf.Log())
		}
	}
}
