package lease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/lease"
	"github.com/genropy/postino/internal/testrig/outboxtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// claimAll puts n messages in PROCESSING under one lease and returns them.
func claimAll(t *testing.T, s *bolt.Store, n int, until time.Time) []*backends.Message {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		if err := s.Create(ctx, &backends.Message{ID: id, EmlPath: id + ".eml"}); err != nil {
			t.Fatal(err)
		}
		for _, tr := range []backends.Transition{
			{ID: id, From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: now.Add(time.Minute)},
			{ID: id, From: backends.StatusIntaking, To: backends.StatusReady},
		} {
			if err := s.Transition(ctx, tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: time.Now().UTC(),
		LeaseUntil: until, Limit: n})
	if err != nil || len(ms) != n {
		t.Fatalf("claim: %d, %v", len(ms), err)
	}
	return ms
}

// Every lease held is renewed, in batches, and a transition then holds the
// renewed lease.
func TestRenew(t *testing.T) {
	store := outboxtest.Store(t)
	n := backends.MaxRenewal + 20 // two batches
	claimed := time.Now().UTC().Add(time.Minute)
	ms := claimAll(t, store, n, claimed)
	r := lease.New(store, backends.StatusProcessing, time.Hour, quiet)
	holds := make([]*lease.Hold, n)
	for i, m := range ms {
		holds[i] = r.Hold(m.ID, m.LeaseUntil)
	}
	r.Renew(context.Background())
	for i, m := range ms {
		until, lost := r.Until(holds[i])
		if lost || !until.After(claimed.Add(30*time.Minute)) {
			t.Fatalf("%s: lease %s (lost %v) after the renewal, want about an hour from now", m.ID, until, lost)
		}
		got, _ := store.Get(context.Background(), m.ID)
		if !backends.SameLease(got.LeaseUntil, until) {
			t.Fatalf("%s: the outbox has lease %s, the renewer %s", m.ID, got.LeaseUntil, until)
		}
	}
	leases := r.Release(holds[0])
	if err := lease.Write(backends.Transition{ID: ms[0].ID, From: backends.StatusProcessing, To: backends.StatusSent}, leases,
		func(t backends.Transition) error { return store.Transition(context.Background(), t) }); err != nil {
		t.Errorf("transition holding the renewed lease: %v", err)
	}
}

// The events a dispatcher holds calling are renewed with their messages,
// and an event's result then lands under the renewed lease.
func TestRenewEvents(t *testing.T) {
	store := outboxtest.Store(t)
	ctx := context.Background()
	m := claimAll(t, store, 1, time.Now().UTC().Add(time.Minute))[0]
	if err := store.Transition(ctx, backends.Transition{ID: m.ID, From: backends.StatusProcessing, To: backends.StatusSent,
		Event: &backends.Event{ID: "e1", Outcome: string(backends.StatusSent)}}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	claimed := now.Add(time.Minute)
	es, err := store.ClaimEvents(ctx, backends.EventClaim{Now: now, LeaseUntil: claimed, Limit: 1})
	if err != nil || len(es) != 1 {
		t.Fatalf("ClaimEvents = %v, %v", es, err)
	}
	r := lease.ForEvents(store, time.Hour, quiet)
	h := r.Hold(es[0].ID, es[0].LeaseUntil)
	r.Renew(ctx)
	until, lost := r.Until(h)
	if lost || !until.After(claimed.Add(30*time.Minute)) {
		t.Fatalf("lease %s (lost %v) after the renewal, want about an hour from now", until, lost)
	}
	if got, _ := store.Get(ctx, m.ID); got.Status != backends.StatusCallingSent || !backends.SameLease(got.LeaseUntil, until) {
		t.Errorf("the message is %s until %s, want %s until %s", got.Status, got.LeaseUntil, backends.StatusCallingSent, until)
	}
	err = lease.Try(r.Release(h), func(held time.Time) error {
		_, err := store.UpdateEvent(ctx, backends.EventUpdate{ID: "e1", From: backends.EventCalling, To: backends.EventAcked, Held: held})
		return err
	})
	if err != nil {
		t.Errorf("result holding the renewed lease: %v", err)
	}
}

// A message whose lease ran out and was claimed again is lost to its old
// holder: it is not renewed, and the holder learns it.
func TestLost(t *testing.T) {
	store := outboxtest.Store(t)
	ctx := context.Background()
	first := time.Now().UTC().Add(time.Minute)
	ms := claimAll(t, store, 1, first)
	r := lease.New(store, backends.StatusProcessing, time.Hour, quiet)
	h := r.Hold(ms[0].ID, ms[0].LeaseUntil)
	if n, err := store.Restore(ctx, first.Add(time.Second)); n != 1 || err != nil {
		t.Fatalf("Restore = %d, %v", n, err)
	}
	now := time.Now().UTC().Add(2 * time.Minute)
	second := now.Add(time.Minute)
	if ms, err := store.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now,
		LeaseUntil: second, Limit: 1}); err != nil || len(ms) != 1 {
		t.Fatalf("second claim: %v, %v", ms, err)
	}
	r.Renew(ctx)
	if _, lost := r.Until(h); !lost {
		t.Error("the hold is not lost")
	}
	if m, _ := store.Get(ctx, ms[0].ID); !backends.SameLease(m.LeaseUntil, second) {
		t.Errorf("the second claim's lease became %s", m.LeaseUntil)
	}
}

// unsure is a real outbox whose renewals write, then fail while failing is
// set, as a commit whose answer is lost does.
type unsure struct {
	*bolt.Store
	failing atomic.Bool
}

func (u *unsure) Renew(ctx context.Context, r backends.Renewal) ([]string, error) {
	got, err := u.Store.Renew(ctx, r)
	if err == nil && u.failing.Load() {
		return nil, errors.New("connection lost (test)")
	}
	return got, err
}

// A renewal that failed may have written: the hold is under one of two
// leases, and neither the next renewal nor the transition loses it.
func TestUnknownOutcome(t *testing.T) {
	store := &unsure{Store: outboxtest.Store(t)}
	ctx := context.Background()
	ms := claimAll(t, store.Store, 2, time.Now().UTC().Add(time.Minute))
	r := lease.New(store, backends.StatusProcessing, time.Hour, quiet)
	renewed, released := r.Hold(ms[0].ID, ms[0].LeaseUntil), r.Hold(ms[1].ID, ms[1].LeaseUntil)
	store.failing.Store(true)
	r.Renew(ctx)
	store.failing.Store(false)
	leases := r.Release(released)
	if len(leases) != 2 {
		t.Fatalf("leases after a renewal of unknown outcome: %v, want the old and the new", leases)
	}
	if err := lease.Write(backends.Transition{ID: ms[1].ID, From: backends.StatusProcessing, To: backends.StatusSent}, leases,
		func(t backends.Transition) error { return store.Transition(ctx, t) }); err != nil {
		t.Errorf("transition: %v", err)
	}
	r.Renew(ctx)
	until, lost := r.Until(renewed)
	m, _ := store.Get(ctx, ms[0].ID)
	if lost || !backends.SameLease(m.LeaseUntil, until) {
		t.Errorf("after the next renewal: lost %v, lease %s, the outbox has %s", lost, until, m.LeaseUntil)
	}
}

// gated is a real outbox whose renewals wait for open once started, as a
// slow store's do.
type gated struct {
	*bolt.Store
	started chan struct{} // closed by the first renewal
	open    chan struct{}
	once    sync.Once
}

func (g *gated) Renew(ctx context.Context, r backends.Renewal) ([]string, error) {
	g.once.Do(func() { close(g.started) })
	<-g.open
	return g.Store.Renew(ctx, r)
}

// A worker releasing its message does not wait for a renewal under way,
// and its transition lands whether the renewal writes before it or after;
// the renewal that finds the message moved on does not call it lost.
func TestReleaseDuringRenewal(t *testing.T) {
	for _, renewalFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("renewal first %v", renewalFirst), func(t *testing.T) {
			store := &gated{Store: outboxtest.Store(t), started: make(chan struct{}), open: make(chan struct{})}
			ctx := context.Background()
			ms := claimAll(t, store.Store, 1, time.Now().UTC().Add(time.Minute))
			var logged bytes.Buffer
			r := lease.New(store, backends.StatusProcessing, time.Hour, slog.New(slog.NewTextHandler(&logged, nil)))
			h := r.Hold(ms[0].ID, ms[0].LeaseUntil)
			renewed := make(chan struct{})
			go func() { r.Renew(ctx); close(renewed) }()
			<-store.started
			released := make(chan []time.Time)
			go func() { released <- r.Release(h) }()
			var leases []time.Time
			select {
			case leases = <-released:
			case <-time.After(30 * time.Second):
				t.Fatal("Release waits for the renewal under way")
			}
			if len(leases) != 2 {
				t.Fatalf("leases during a renewal: %v, want the one held and the one asked for", leases)
			}
			if renewalFirst {
				close(store.open)
				<-renewed
				if m, _ := store.Get(ctx, ms[0].ID); !backends.SameLease(m.LeaseUntil, leases[1]) {
					t.Fatalf("the renewal wrote %s, want %s", m.LeaseUntil, leases[1])
				}
			}
			if err := lease.Write(backends.Transition{ID: ms[0].ID, From: backends.StatusProcessing, To: backends.StatusSent}, leases,
				func(t backends.Transition) error { return store.Transition(ctx, t) }); err != nil {
				t.Errorf("transition: %v", err)
			}
			if !renewalFirst {
				close(store.open)
				<-renewed
			}
			if m, _ := store.Get(ctx, ms[0].ID); m.Status != backends.StatusSent {
				t.Errorf("status %s, want SENT", m.Status)
			}
			if strings.Contains(logged.String(), "lease lost") {
				t.Errorf("a released message was called lost:\n%s", logged.String())
			}
		})
	}
}

// A hold released while an earlier batch of the round is being renewed is
// not renewed after its release: its message stays under the leases
// Release gave its worker, and the worker's transition lands. (Renewed
// after it, the message was under a lease its worker did not know, and a
// delivered message was sent again once that lease ran out.)
func TestReleaseBeforeItsBatch(t *testing.T) {
	store := &gated{Store: outboxtest.Store(t), started: make(chan struct{}), open: make(chan struct{})}
	ctx := context.Background()
	n := 2 * backends.MaxRenewal
	ms := claimAll(t, store.Store, n, time.Now().UTC().Add(time.Minute))
	r := lease.New(store, backends.StatusProcessing, time.Hour, quiet)
	holds := make([]*lease.Hold, n)
	for i, m := range ms {
		holds[i] = r.Hold(m.ID, m.LeaseUntil)
	}
	renewed := make(chan struct{})
	go func() { r.Renew(ctx); close(renewed) }()
	<-store.started // the first batch is being renewed, the second waits
	leases := make([][]time.Time, n)
	for i, h := range holds {
		leases[i] = r.Release(h)
	}
	close(store.open)
	<-renewed
	for i, m := range ms {
		if err := lease.Write(backends.Transition{ID: m.ID, From: backends.StatusProcessing, To: backends.StatusSent}, leases[i],
			func(t backends.Transition) error { return store.Transition(ctx, t) }); err != nil {
			t.Errorf("%s: transition under the leases Release gave, %v: %v", m.ID, leases[i], err)
		}
	}
}
