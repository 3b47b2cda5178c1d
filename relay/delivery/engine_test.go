package delivery

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/spool"
)

// slowOutcomes is an outbox whose commits of delivery outcomes take long:
// each waits until the upstream has every message, or gives up.
type slowOutcomes struct {
	*bolt.Store
	upstream *smtptest.Server
	want     int
	gaveUp   atomic.Bool
}

func (s *slowOutcomes) Transition(ctx context.Context, t backends.Transition) error {
	if t.From == backends.StatusProcessing {
		deadline := time.Now().Add(60 * time.Second)
		for !s.gaveUp.Load() && len(s.upstream.Messages()) < s.want {
			if time.Now().After(deadline) {
				s.gaveUp.Store(true)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return s.Store.Transition(ctx, t)
}

// A session must go on to its next message while the outcome of the last
// is committed: on one connection, a session that waited would deliver one
// message per outbox commit.
func TestSessionDoesNotWaitForTheOutbox(t *testing.T) {
	sp, store := outboxtest.Open(t)
	const n = 3
	addReady(t, sp, store, n)
	upstream := smtptest.Start(t, smtptest.Options{})
	slow := &slowOutcomes{Store: store, upstream: upstream, want: n}
	stop := runEngine(t, slow, sp, Route{Name: DefaultRoute, Smarthost: upstream.Addr, TLS: TLSNone, MaxConnections: 1}, time.Minute)
	outboxtest.WaitCounts(t, store, time.Minute, func(counts map[backends.Status]int) bool {
		return counts[backends.StatusSentAcknowledged] == n
	})
	stop()
	if slow.gaveUp.Load() {
		t.Error("the session waited for the outbox before sending the next message")
	}
}

// noRenewals is an outbox that cannot renew leases, as one that fails does.
type noRenewals struct{ *bolt.Store }

func (noRenewals) Renew(context.Context, backends.Renewal) ([]string, error) {
	return nil, errors.New("outbox unavailable (test)")
}

// A message that waits long for a session (here a rate-limited route) while
// its lease cannot be renewed must not be sent once the lease may run out:
// the lease would return it to READY while it is on its way, and a second
// claim would send it again.
func TestLongWaitIsHandedBack(t *testing.T) {
	sp, store := outboxtest.Open(t)
	const n = 50
	addReady(t, sp, store, n)
	upstream := smtptest.Start(t, smtptest.Options{})
	const lease = 4 * time.Second
	// Ten a second through one connection: the last of the fifty would
	// wait five seconds, past the lease.
	stop := runEngine(t, noRenewals{store}, sp, Route{Name: DefaultRoute, Smarthost: upstream.Addr, TLS: TLSNone, MaxConnections: 1, Rate: 10}, lease)
	stopRestore := outboxtest.Restoring(t, store)
	outboxtest.WaitCounts(t, store, time.Minute, func(counts map[backends.Status]int) bool {
		return counts[backends.StatusSentAcknowledged] == n
	})
	stopRestore()
	stop()
	seen := map[string]int{}
	for _, m := range upstream.Messages() {
		seen[m.Header("X-Genro-Mail-ID")]++
	}
	for i := range n {
		if id := fmt.Sprintf("m%d", i); seen[id] != 1 {
			t.Errorf("%s reached the upstream %d times, want once", id, seen[id])
		}
	}
	handedBack := 0
	for i := range n {
		h, err := store.History(context.Background(), fmt.Sprintf("m%d", i))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range h {
			if strings.HasPrefix(e.Reason, "handed back: it waited") {
				handedBack++
			}
		}
	}
	if handedBack == 0 {
		t.Error("no message was handed back, so the test did not make any wait long")
	}
}

// addReady puts n READY messages, m0 to m<n-1>, in the outbox.
func addReady(t *testing.T, sp *spool.Spool, store *bolt.Store, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		outboxtest.Add(t, sp, store, &backends.Message{ID: id, Priority: 2,
			Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{"b@example.net"}}},
			[]byte("From: app@example.com\r\nX-Genro-Mail-ID: "+id+"\r\nSubject: hi\r\n\r\nhello\r\n"))
		for _, tr := range []backends.Transition{
			{ID: id, From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: time.Now().Add(time.Minute)},
			{ID: id, From: backends.StatusIntaking, To: backends.StatusReady, Route: DefaultRoute},
		} {
			if err := store.Transition(ctx, tr); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// runEngine delivers through route as the default until the returned stop.
func runEngine(t *testing.T, store Store, sp *spool.Spool, route Route, lease time.Duration) (stop func()) {
	t.Helper()
	return runEngineWith(t, store, sp, route, lease, nil)
}

// runEngineWith is runEngine with the outcomes written through outcomes.
func runEngineWith(t *testing.T, store Store, sp *spool.Spool, route Route, lease time.Duration, outcomes Outcomes) (stop func()) {
	t.Helper()
	e := testEngine(t, store, sp, route, lease, 10*time.Millisecond)
	e.cfg.Outcomes = outcomes
	return runUntilStopped(e)
}

// runUntilStopped runs e until the returned stop.
func runUntilStopped(e *Engine) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// testEngine makes an engine that delivers through route as the default,
// looks for READY messages every poll without a wake-up, and acknowledges
// outcomes at once. The routes are smarthosts: nothing asks the system's
// resolver.
func testEngine(t *testing.T, store Store, sp *spool.Spool, route Route, lease, poll time.Duration) *Engine {
	t.Helper()
	routes, err := NewRoutes([]Route{route}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return NewEngine(Config{
		MaxInFlight: 64, Lease: lease, Poll: poll, IdleTimeout: time.Second,
		ShutdownTimeout: time.Second, MXConnections: 1, Timeouts: DefaultTimeouts(),
		Retry:    Retry{Schedule: backoff.Schedule{First: time.Minute, Max: time.Hour}, MaxAge: time.Hour},
		HeloName: "relay.test", Owner: "test", Acknowledge: true,
	}, store, sp, routes, net.DefaultResolver, slog.New(slog.NewTextHandler(io.Discard, nil)), NewMetrics(prometheus.NewRegistry()), nil)
}
