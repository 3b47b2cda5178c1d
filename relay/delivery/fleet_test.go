package delivery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends/mysql"
	"github.com/genropy/postino/internal/testrig/dnstest"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/internal/testrig/sqltest"
	"github.com/genropy/postino/relay/delivery/sites"
	"github.com/genropy/postino/spool"
)

// openMySQL is an outbox of the test's own on the MySQL server.
func openMySQL(t *testing.T) *mysql.Store {
	t.Helper()
	ctx := context.Background()
	dsn := sqltest.Database(t, "mysql")
	db, err := mysql.Connect(ctx, dsn, mysql.Options{MaxConns: 2}) // Migrate holds one connection and reads with another
	if err != nil {
		t.Fatal(err)
	}
	_, err = mysql.Migrate(ctx, db)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	store, err := mysql.Open(ctx, dsn, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// fleetDNS answers for the domains d0.fleet.example to d9.fleet.example
// (addToSites), whose MX host is mx.fleet.test, 127.0.0.2.
func fleetDNS(t *testing.T) *dnstest.Server {
	records := []string{". IN NS a.root.test.", "mx.fleet.test. IN A 127.0.0.2"}
	for i := range 10 {
		records = append(records, fmt.Sprintf("d%d.fleet.example. IN MX 10 mx.fleet.test.", i))
	}
	return dnstest.Start(t, dnstest.Zone{Records: records})
}

// fleetRig is the fleet tests' world: a MySQL outbox and a spool, the
// MX host of the site fleet on 127.0.0.2, DNS for its ten domains, and
// the site's rule (4 sessions at once, and the lines of more).
func fleetRig(t *testing.T, more string) (*mysql.Store, *spool.Spool, int, *smtptest.Server, *dnstest.Server, *sites.Rules) {
	t.Helper()
	store := openMySQL(t)
	sp, err := spool.Open(filepath.Join(t.TempDir(), "spool"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	port := smtptest.SharedPort(t, "127.0.0.2")
	mx := smtptest.Start(t, smtptest.Options{Addr: "127.0.0.2:" + strconv.Itoa(port)})
	rules, err := sites.Load([]byte(`
default:
  messages_per_session: 1000
  connections_per_minute: 60000
  max_queued: 100
providers:
  - name: fleet
    mx: [mx.fleet.test]
    sessions: 4
`+more), 10)
	if err != nil {
		t.Fatal(err)
	}
	return store, sp, port, mx, fleetDNS(t), rules
}

// TestFleetSessions: two relays on one MySQL outbox deliver to a site
// whose rule allows 4 sessions at once; the site's MX host, a real server
// that keeps each message a moment, never sees more than 4 at once, and
// every message arrives once.
func TestFleetSessions(t *testing.T) {
	store, sp, port, mx, dns, rules := fleetRig(t, "")
	mx.Hang(20 * time.Millisecond)
	const n = 600
	addToSites(t, sp, store, n, []string{"fleet"})
	for _, owner := range []string{"relay-a", "relay-b"} {
		e := mxEngine(t, Config{MaxInFlight: 64, MXConnections: 10, Lease: 20 * time.Second, Owner: owner, Sites: rules, Leases: store, Fleet: true},
			store, sp, port, dns)
		defer runUntilStopped(e)()
	}
	waitFor(t, "every message", func() bool { return len(mx.Messages()) >= n })
	seen := map[string]int{}
	for _, m := range mx.Messages() {
		seen[m.Header("X-Genro-Mail-ID")]++
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s was delivered %d times", id, k)
		}
	}
	most := 0
	for _, c := range mx.Accepted() {
		most = max(most, c.Open)
	}
	if most > 4 {
		t.Errorf("the site saw %d sessions at once from the two relays; its rule allows 4", most)
	}
	t.Logf("%d messages from two relays: %d connections, at most %d at once", len(seen), len(mx.Accepted()), most)
}

// TestFleetRate: three relays on one MySQL outbox share a site's rate of
// 2,400 messages a minute, each sending the part of it its session slots
// are of the site's sessions: together they stay within 10 % of it.
func TestFleetRate(t *testing.T) {
	store, sp, port, mx, dns, rules := fleetRig(t, "    messages_per_minute: 2400\n")
	const n, perSecond = 400, 40.0
	addToSites(t, sp, store, n, []string{"fleet"})
	for _, owner := range []string{"relay-a", "relay-b", "relay-c"} {
		e := mxEngine(t, Config{MaxInFlight: 64, MXConnections: 10, Lease: 20 * time.Second, Owner: owner, Sites: rules, Leases: store, Fleet: true},
			store, sp, port, dns)
		defer runUntilStopped(e)()
	}
	waitFor(t, "the site's messages", func() bool { return len(mx.Messages()) >= n })
	got := mx.Messages()[:n]
	took := got[n-1].Received.Sub(got[0].Received)
	rate := float64(n-1) / took.Seconds()
	if rate > 1.1*perSecond {
		t.Errorf("three relays sent the site %.1f messages a second; its rule allows %.0f (+10 %%)", rate, perSecond)
	}
	t.Logf("three relays: %d messages to a site of %.0f a second in %s: %.1f a second", n, perSecond, took.Round(time.Millisecond), rate)
}

// TestFleetDeadRelay: a relay holds a site's slots while it renews them;
// once it dies (its renewals stop, nothing released) another relay takes
// them within their lease.
func TestFleetDeadRelay(t *testing.T) {
	store := outboxtest.Store(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const lease = 300 * time.Millisecond
	a, b := newFleet(store, "relay-a", lease, log), newFleet(store, "relay-b", lease, log)
	ctx, die := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.run(ctx); close(done) }()
	for range 4 {
		if i, err := a.take(ctx, "site", 4); err != nil || i < 0 {
			t.Fatalf("relay a takes a slot: %d %v", i, err)
		}
	}
	// Over several leases, relay a's renewals keep every slot its own.
	deadline := time.Now().Add(4 * lease)
	for time.Now().Before(deadline) {
		if i, err := b.take(context.Background(), "site", 4); err != nil || i >= 0 {
			t.Fatalf("relay b took slot %d (%v) while relay a held them all", i, err)
		}
		time.Sleep(lease / 4)
	}
	die()
	<-done
	died := time.Now()
	waitFor(t, "relay a's slots", func() bool {
		i, err := b.take(context.Background(), "site", 4)
		if err != nil {
			t.Fatal(err)
		}
		return i >= 0 && b.holds("site") == 4
	})
	t.Logf("relay b held relay a's 4 slots %s after it died (lease %s)", time.Since(died).Round(time.Millisecond), lease)
	// Released, a slot is free at once.
	b.give(context.Background(), "site", 0)
	c := newFleet(store, "relay-c", lease, log)
	if i, err := c.take(context.Background(), "site", 4); err != nil || i != 0 {
		t.Errorf("the slot relay b released: %d %v", i, err)
	}
}

// TestSuspendAcrossFleet: an operator's suspension of a site, made on one
// relay, holds on another relay of the store, which sends the site
// nothing; it ends by itself when its time is up, and resume ends it at
// once.
func TestSuspendAcrossFleet(t *testing.T) {
	sp, store := outboxtest.Open(t)
	port := smtptest.SharedPort(t, "127.0.0.2")
	mx := smtptest.Start(t, smtptest.Options{Addr: "127.0.0.2:" + strconv.Itoa(port)})
	dns := dnstest.Start(t, dnstest.Zone{Records: []string{". IN NS a.root.test.", "mx.fleet.test. IN A 127.0.0.2",
		"d0.fleet.example. IN MX 10 mx.fleet.test."}})
	engine := func(owner string) *Engine {
		return mxEngine(t, Config{MaxInFlight: 16, MXConnections: 4, Lease: 20 * time.Second, Owner: owner, Leases: store, Fleet: true}, store, sp, port, dns)
	}
	a, b := engine("relay-a"), engine("relay-b")
	ctx := context.Background()
	if err := a.Suspend(ctx, "mx.fleet.test", "operator ann", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	defer runUntilStopped(b)()
	addToSites(t, sp, store, 3, []string{"fleet"})
	waitFor(t, "relay b's site", func() bool {
		v, ok := b.SiteByKey("mx.fleet.test")
		return ok && v.State == SiteSuspended && v.Queued == 0
	})
	v, _ := b.SiteByKey("mx.fleet.test")
	if !strings.Contains(v.Why, "suspended by operator ann") {
		t.Errorf("relay b's site: %+v", v)
	}
	if n := len(mx.Messages()); n != 0 {
		t.Errorf("the suspended site got %d messages from relay b", n)
	}
	// A suspension ends by itself.
	if err := a.Suspend(ctx, "mx.fleet.test", "operator bob", time.Now().Add(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	c := engine("relay-c")
	c.siteOf(sites.Site{Key: "mx.fleet.test", Limits: sites.Limits{Sessions: 4}})
	if v, _ := c.SiteByKey("mx.fleet.test"); v.State != SiteSuspended || !strings.Contains(v.Why, "operator bob") {
		t.Errorf("relay c's site, suspended again: %+v", v)
	}
	waitFor(t, "the suspension's end", func() bool {
		v, _ := c.SiteByKey("mx.fleet.test")
		return v.State == SiteUp
	})
	// Resume ends a suspension at once, on the relay told, and for a
	// site that another relay sees first.
	if err := a.Suspend(ctx, "mx.fleet.test", "operator ann", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := a.Resume(ctx, "mx.fleet.test"); err != nil {
		t.Fatal(err)
	}
	d := engine("relay-d")
	d.siteOf(sites.Site{Key: "mx.fleet.test", Limits: sites.Limits{Sessions: 4}})
	if v, _ := d.SiteByKey("mx.fleet.test"); v.State != SiteUp {
		t.Errorf("a resumed site: %+v", v)
	}
}
