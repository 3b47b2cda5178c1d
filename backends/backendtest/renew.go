package backendtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

var leaseTests = []test[messageStore]{
	{"HeldTransition", testHeldTransition},
}

// claimOne claims the READY message id for delivery under a lease until
// until, and fails the test unless it is the one claimed.
func claimOne(t *testing.T, s messageStore, id string, now, until time.Time) *backends.Message {
	t.Helper()
	ms, err := s.Claim(context.Background(), backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing,
		Now: now, LeaseUntil: until, Limit: 1, Reason: "claimed for test"})
	if err != nil || len(ms) != 1 || ms[0].ID != id {
		t.Fatalf("Claim = %v, %v; want %s", ms, err, id)
	}
	return ms[0]
}

// A transition that names the lease it holds is refused once the message
// is under another: an outcome of a claim that ran out, written late, must
// not overwrite the work of the claim that took the message over.
func testHeldTransition(t *testing.T, s messageStore) {
	ctx := context.Background()
	const id = "held"
	walk(t, s, id, backends.StatusReady)
	// Nanoseconds that the stores keeping microseconds drop: the claimer
	// names its lease as it asked for it.
	first := at(time.Minute + 123456789)
	claimOne(t, s, id, at(10*time.Second), first)
	sent := func(held time.Time) backends.Transition {
		return backends.Transition{ID: id, From: backends.StatusProcessing, To: backends.StatusSent,
			At: at(20 * time.Second), Reason: "sent", Held: held}
	}
	if err := s.Transition(ctx, sent(first.Add(time.Millisecond))); !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Errorf("transition holding another lease: %v, want ErrLockNotAcquired", err)
	}
	if n, err := s.Restore(ctx, at(2*time.Minute)); err != nil || n != 1 {
		t.Fatalf("Restore = %d, %v; want 1", n, err)
	}
	second := at(4 * time.Minute)
	claimOne(t, s, id, at(3*time.Minute), second)
	if err := s.Transition(ctx, sent(first)); !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Errorf("transition of the claim that ran out: %v, want ErrLockNotAcquired", err)
	}
	if m := mustGet(t, s, id); m.Status != backends.StatusProcessing || !backends.SameLease(m.LeaseUntil, second) {
		t.Fatalf("after a refused transition: %s until %s, want PROCESSING until %s", m.Status, m.LeaseUntil, second)
	}
	if err := s.Transition(ctx, sent(second)); err != nil {
		t.Fatalf("transition of the claim that holds the lease: %v", err)
	}
	if got := mustGet(t, s, id).Status; got != backends.StatusSent {
		t.Errorf("status %s, want SENT", got)
	}
}
