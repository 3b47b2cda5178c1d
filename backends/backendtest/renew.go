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

var eventLeaseTests = []test[eventStore]{
	{"RenewEvents", testRenewEvents},
	{"RenewEventsTaken", testRenewEventsTaken},
	{"ClaimEventTakesItsMessage", testClaimEventTakesItsMessage},
}

// claimEventsUntil claims the due events at now under the lease until,
// and fails the test unless they are want.
func claimEventsUntil(t *testing.T, s eventStore, now, until time.Time, want ...string) {
	t.Helper()
	es, err := s.ClaimEvents(context.Background(), backends.EventClaim{Now: now, LeaseUntil: until, Limit: 10, Reason: "calling test plugins"})
	if got := eventIDs(es); err != nil || !slices.Equal(got, want) {
		t.Fatalf("ClaimEvents = %v, %v; want %v", got, err, want)
	}
}

// eventLease fails the test unless event id of message msg is calling
// under until.
func eventLease(t *testing.T, s eventStore, msg, id string, until time.Time) {
	t.Helper()
	es, err := s.Events(context.Background(), msg)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.ID == id && (e.State != backends.EventCalling || !backends.SameLease(e.LeaseUntil, until)) {
			t.Errorf("event %s is %s until %s, want calling until %s", id, e.State, e.LeaseUntil, until)
		}
	}
}

// RenewEvents extends the leases of the calling events held as the renewal
// says, and of their messages in their calling status, and tells which: a
// restore then leaves them alone, and the dispatcher's result lands under
// the renewed lease only.
func testRenewEvents(t *testing.T, s eventStore) {
	ctx := context.Background()
	// A notice moves no status: its renewal leaves its message alone.
	sent(t, s, "rev-notice", "rev-2")
	claimEventsUntil(t, s, at(2*time.Hour), at(3*time.Hour), "rev-2")
	updateEvent(t, s, backends.EventUpdate{ID: "rev-2", From: backends.EventCalling, To: backends.EventAcked, At: at(2 * time.Hour)})
	if err := s.AddEvent(ctx, &backends.Event{ID: "rev-3", MessageID: "rev-notice", Outcome: "DELAYED", At: at(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	sent(t, s, "rev-sent", "rev-1")
	// A pending event is not renewed.
	sent(t, s, "rev-pending", "rev-4")
	updateEvent(t, s, backends.EventUpdate{ID: "rev-4", From: backends.EventPending, To: backends.EventParked, At: at(2 * time.Hour)})
	updateEvent(t, s, backends.EventUpdate{ID: "rev-4", From: backends.EventParked, To: backends.EventPending, At: at(2 * time.Hour),
		DueAt: at(9 * time.Hour)})
	// Nanoseconds that the stores keeping microseconds drop: the claimer
	// names its lease as it asked for it.
	now, held := at(3*time.Hour), at(3*time.Hour+time.Minute+123456789)
	claimEventsUntil(t, s, now, held, "rev-1", "rev-3")
	until := at(3*time.Hour + 5*time.Minute + 987654321)
	// An event named twice is refused before anything is written.
	if _, err := s.RenewEvents(ctx, backends.EventRenewal{IDs: []string{"rev-1", "rev-3", "rev-1"}, Held: held, Until: until}); err == nil {
		t.Error("RenewEvents naming rev-1 twice: no error")
	}
	got, err := s.RenewEvents(ctx, backends.EventRenewal{IDs: []string{"rev-1", "rev-3", "rev-4", "rev-missing"}, Held: held, Until: until})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if want := []string{"rev-1", "rev-3"}; !slices.Equal(got, want) {
		t.Errorf("RenewEvents = %v, want %v", got, want)
	}
	eventLease(t, s, "rev-sent", "rev-1", until)
	eventLease(t, s, "rev-notice", "rev-3", until)
	if m := mustGet(t, s, "rev-sent"); m.Status != backends.StatusCallingSent || !backends.SameLease(m.LeaseUntil, until) {
		t.Errorf("message of a renewed event: %s until %s, want %s until %s", m.Status, m.LeaseUntil, backends.StatusCallingSent, until)
	}
	if m := mustGet(t, s, "rev-notice"); m.Status != backends.StatusSentAcknowledged {
		t.Errorf("message of a renewed notice: %s, want %s", m.Status, backends.StatusSentAcknowledged)
	}
	if n, err := s.Restore(ctx, held.Add(time.Second)); err != nil || n != 0 {
		t.Errorf("Restore past the claimed lease = %d, %v; want the renewed leases kept", n, err)
	}
	// The lease renewed, not the one claimed, is the one held now.
	ack := func(held time.Time) error {
		_, err := s.UpdateEvent(ctx, backends.EventUpdate{ID: "rev-1", From: backends.EventCalling, To: backends.EventAcked,
			At: now, Held: held, Reason: "acknowledged"})
		return err
	}
	if err := ack(held); !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Errorf("update naming the lease before the renewal: %v, want ErrLockNotAcquired", err)
	}
	if err := ack(until); err != nil {
		t.Errorf("update naming the renewed lease: %v", err)
	}
	if m := mustGet(t, s, "rev-sent"); m.Status != backends.StatusSentAcknowledged {
		t.Errorf("message after the ack: %s", m.Status)
	}
	if n, err := s.Restore(ctx, until.Add(time.Second)); err != nil || n != 1 {
		t.Errorf("Restore past the renewed lease = %d, %v; want 1 (the notice)", n, err)
	}
}

// An event whose lease ran out and was claimed again is not renewed by its
// old holder, whose result is refused: the new holder's claim and result
// stand.
func testRenewEventsTaken(t *testing.T, s eventStore) {
	ctx := context.Background()
	sent(t, s, "revt", "revt-1")
	first := at(2*time.Hour + time.Minute)
	claimEventsUntil(t, s, at(2*time.Hour), first, "revt-1")
	if n, err := s.Restore(ctx, first.Add(time.Second)); err != nil || n != 2 {
		t.Fatalf("Restore = %d, %v; want the event and its message", n, err)
	}
	// A restored event is due when it was restored.
	now := time.Now().UTC().Add(time.Hour)
	second := now.Add(time.Minute)
	claimEventsUntil(t, s, now, second, "revt-1")
	if got, err := s.RenewEvents(ctx, backends.EventRenewal{IDs: []string{"revt-1"}, Held: first, Until: at(5 * time.Hour)}); err != nil || len(got) != 0 {
		t.Errorf("RenewEvents by the holder whose lease ran out = %v, %v; want none", got, err)
	}
	eventLease(t, s, "revt", "revt-1", second)
	update := func(held time.Time) error {
		_, err := s.UpdateEvent(ctx, backends.EventUpdate{ID: "revt-1", From: backends.EventCalling, To: backends.EventAcked,
			At: now, Held: held, Acked: []string{"test"}, Reason: "acknowledged"})
		return err
	}
	if err := update(first); !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Errorf("result of the holder whose lease ran out: %v, want ErrLockNotAcquired", err)
	}
	if m := mustGet(t, s, "revt"); m.Status != backends.StatusCallingSent || !backends.SameLease(m.LeaseUntil, second) {
		t.Fatalf("after a refused result: %s until %s, want %s until %s", m.Status, m.LeaseUntil, backends.StatusCallingSent, second)
	}
	if err := update(second); err != nil {
		t.Fatalf("result of the holder of the lease: %v", err)
	}
	if n := reached(t, s, "revt", backends.StatusCallingSent); n != 2 {
		t.Errorf("%d claims, want the one that ran out and the one that took over", n)
	}
	if n := reached(t, s, "revt", backends.StatusSentAcknowledged); n != 1 {
		t.Errorf("acknowledged %d times, want once", n)
	}
}

// reached counts the history rows of message id in status st.
func reached(t *testing.T, s messageStore, id string, st backends.Status) int {
	t.Helper()
	h, err := s.History(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range h {
		if e.Status == st {
			n++
		}
	}
	return n
}

// A message left in the calling status by an earlier claim of its event,
// under that claim's lease, takes the lease of the event's new claim: a
// restore must not take it from the holder of the event.
func testClaimEventTakesItsMessage(t *testing.T, s eventStore) {
	ctx := context.Background()
	sent(t, s, "ctm", "ctm-1")
	claimEventsUntil(t, s, at(2*time.Hour), at(2*time.Hour+time.Minute), "ctm-1")
	// The event goes back to pending, and its message back to SENT; the
	// message alone goes to calling again, under a lease of its own.
	updateEvent(t, s, backends.EventUpdate{ID: "ctm-1", From: backends.EventCalling, To: backends.EventPending, At: at(2 * time.Hour)})
	stale := at(2*time.Hour + 2*time.Minute)
	if err := s.Transition(ctx, backends.Transition{ID: "ctm", From: backends.StatusSent, To: backends.StatusCallingSent,
		At: at(2 * time.Hour), LeaseUntil: stale, Reason: "left by an earlier claim"}); err != nil {
		t.Fatal(err)
	}
	lease := at(2*time.Hour + 10*time.Minute)
	claimEventsUntil(t, s, at(2*time.Hour+time.Minute), lease, "ctm-1")
	if m := mustGet(t, s, "ctm"); m.Status != backends.StatusCallingSent || !backends.SameLease(m.LeaseUntil, lease) {
		t.Fatalf("message of the claimed event: %s until %s, want %s until %s", m.Status, m.LeaseUntil, backends.StatusCallingSent, lease)
	}
	if n, err := s.Restore(ctx, stale.Add(time.Second)); err != nil || n != 0 {
		t.Errorf("Restore past the stale lease = %d, %v; want the claim's lease kept", n, err)
	}
	updateEvent(t, s, backends.EventUpdate{ID: "ctm-1", From: backends.EventCalling, To: backends.EventAcked, At: at(2 * time.Hour), Held: lease})
	if m := mustGet(t, s, "ctm"); m.Status != backends.StatusSentAcknowledged {
		t.Errorf("message after the ack: %s", m.Status)
	}
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
