package backendtest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

var leaseTests = []test[messageStore]{
	{"HeldTransition", testHeldTransition},
	{"Renew", testRenew},
	{"RenewTaken", testRenewTaken},
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

// Renew extends the leases still held as the renewal says, in one call for
// many messages, and tells which: a restore then leaves them alone.
func testRenew(t *testing.T, s messageStore) {
	ctx := context.Background()
	ids := []string{"renew-a", "renew-b", "renew-c"}
	for _, id := range ids {
		walk(t, s, id, backends.StatusReady)
	}
	walk(t, s, "renew-intaking", backends.StatusIntaking)
	held := at(time.Minute + 123456789)
	ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing,
		Now: at(10 * time.Second), LeaseUntil: held, Limit: 10})
	if err != nil || len(ms) != len(ids) {
		t.Fatalf("Claim = %d messages, %v; want %d", len(ms), err, len(ids))
	}
	until := at(5*time.Minute + 987654321)
	got, err := s.Renew(ctx, backends.Renewal{IDs: append(slices.Clone(ids), "renew-missing", "renew-intaking"),
		Status: backends.StatusProcessing, Held: held, Until: until})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		t.Errorf("Renew = %v, want %v", got, ids)
	}
	for _, id := range ids {
		if m := mustGet(t, s, id); !backends.SameLease(m.LeaseUntil, until) || m.Status != backends.StatusProcessing {
			t.Errorf("%s: %s until %s after the renewal, want PROCESSING until %s", id, m.Status, m.LeaseUntil, until)
		}
	}
	// The lease renewed, not the one claimed, is the one held now.
	if err := s.Transition(ctx, backends.Transition{ID: "renew-a", From: backends.StatusProcessing, To: backends.StatusSent,
		At: at(time.Minute), Reason: "sent", Held: held}); !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Errorf("transition naming the lease before the renewal: %v, want ErrLockNotAcquired", err)
	}
	// The worker finishes under the renewed lease (a store that remembers
	// the messages it claimed must not answer from the claim's copy).
	if err := s.Transition(ctx, backends.Transition{ID: "renew-b", From: backends.StatusProcessing, To: backends.StatusSent,
		At: at(time.Minute), Reason: "sent", Held: until}); err != nil {
		t.Errorf("transition naming the renewed lease: %v", err)
	}
	// Only renew-intaking, whose lease no one renewed, goes back.
	if n, err := s.Restore(ctx, at(2*time.Minute)); err != nil || n != 1 {
		t.Errorf("Restore past the claimed lease = %d, %v; want the renewed leases kept", n, err)
	}
	if n, err := s.Restore(ctx, at(6*time.Minute)); err != nil || n != len(ids)-1 {
		t.Errorf("Restore past the renewed lease = %d, %v; want %d (one was sent)", n, err, len(ids)-1)
	}
}

// A lease that ran out and was taken by another claim is not renewed by
// its old holder, nor is a message in another status.
func testRenewTaken(t *testing.T, s messageStore) {
	ctx := context.Background()
	const id = "renew-taken"
	walk(t, s, id, backends.StatusReady)
	first := at(time.Minute)
	claimOne(t, s, id, at(10*time.Second), first)
	if got, err := s.Renew(ctx, backends.Renewal{IDs: []string{id}, Status: backends.StatusIntaking,
		Held: first, Until: at(time.Hour)}); err != nil || len(got) != 0 {
		t.Errorf("Renew in another status = %v, %v; want none", got, err)
	}
	if n, err := s.Restore(ctx, at(2*time.Minute)); err != nil || n != 1 {
		t.Fatalf("Restore = %d, %v; want 1", n, err)
	}
	second := at(4 * time.Minute)
	claimOne(t, s, id, at(3*time.Minute), second)
	if got, err := s.Renew(ctx, backends.Renewal{IDs: []string{id}, Status: backends.StatusProcessing,
		Held: first, Until: at(time.Hour)}); err != nil || len(got) != 0 {
		t.Errorf("Renew by the holder whose lease ran out = %v, %v; want none", got, err)
	}
	if m := mustGet(t, s, id); !backends.SameLease(m.LeaseUntil, second) {
		t.Errorf("the newer claim's lease became %s, want %s", m.LeaseUntil, second)
	}
}
