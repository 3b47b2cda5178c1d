package backendtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

var eventTests = []test[eventStore]{
	{"EventWithTransition", testEventWithTransition},
	{"AddEvent", testAddEvent},
	{"EventWithoutID", testEventWithoutID},
	{"EventsWaitingBehind", testEventsWaitingBehind},
	{"EventOrder", testEventOrder},
	{"EventRetryAndPark", testEventRetryAndPark},
	{"EventRestore", testEventRestore},
	{"ConcurrentEventClaimers", testConcurrentEventClaimers},
	{"BounceAfterSent", testBounceAfterSent},
}

// sent moves a fresh message to SENT with its SENT event.
func sent(t *testing.T, s eventStore, id, eventID string) {
	t.Helper()
	walk(t, s, id, backends.StatusProcessing)
	err := s.Transition(context.Background(), backends.Transition{ID: id, From: backends.StatusProcessing, To: backends.StatusSent,
		At: at(time.Hour), Reason: "delivered",
		Event: &backends.Event{ID: eventID, Outcome: string(backends.StatusSent), Reason: "delivered", Details: json.RawMessage(`{"recipients":2}`)}})
	if err != nil {
		t.Fatal(err)
	}
}

func claimEvents(t *testing.T, s eventStore, now time.Time) []string {
	t.Helper()
	es, err := s.ClaimEvents(context.Background(), backends.EventClaim{Now: now, LeaseUntil: now.Add(time.Minute), Limit: 10, Reason: "calling test plugins"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range es {
		if e.State != backends.EventCalling {
			t.Errorf("claimed %s is %s", e.ID, e.State)
		}
		ids = append(ids, e.ID)
	}
	slices.Sort(ids)
	return ids
}

func updateEvent(t *testing.T, s eventStore, u backends.EventUpdate) *backends.Event {
	t.Helper()
	e, err := s.UpdateEvent(context.Background(), u)
	if err != nil {
		t.Fatalf("UpdateEvent(%s %s -> %s): %v", u.ID, u.From, u.To, err)
	}
	return e
}

func testEventWithTransition(t *testing.T, s eventStore) {
	ctx := context.Background()
	sent(t, s, "ev-msg", "ev-1")
	es, err := s.Events(ctx, "ev-msg")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 1 {
		t.Fatalf("events %+v", es)
	}
	e := es[0]
	if e.ID != "ev-1" || e.MessageID != "ev-msg" || e.Seq != 1 || e.Outcome != "SENT" || e.State != backends.EventPending ||
		!e.At.Equal(at(time.Hour)) || !e.DueAt.Equal(at(time.Hour)) || e.Reason != "delivered" {
		t.Errorf("event %+v", e)
	}
	var d map[string]any
	if json.Unmarshal(e.Details, &d) != nil || d["recipients"] != float64(2) {
		t.Errorf("details %s", e.Details)
	}
	// A refused transition records no event.
	walk(t, s, "ev-refused", backends.StatusReady)
	err = s.Transition(ctx, backends.Transition{ID: "ev-refused", From: backends.StatusProcessing, To: backends.StatusSent,
		Event: &backends.Event{ID: "ev-2", Outcome: "SENT"}})
	if !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Fatalf("transition from a stale status: %v", err)
	}
	if es, _ := s.Events(ctx, "ev-refused"); len(es) != 0 {
		t.Errorf("a refused transition recorded events %+v", es)
	}
}

func testAddEvent(t *testing.T, s eventStore) {
	ctx := context.Background()
	sent(t, s, "ev-msg", "ev-1")
	if err := s.AddEvent(ctx, &backends.Event{ID: "ev-3", MessageID: "ev-msg", Outcome: "DELAYED", At: at(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	es, _ := s.Events(ctx, "ev-msg")
	if len(es) != 2 || es[1].ID != "ev-3" || es[1].Seq != 2 {
		t.Errorf("after AddEvent: %+v", es)
	}
	for _, tc := range []struct {
		name string
		e    backends.Event
		want error
	}{
		{"to an unknown message", backends.Event{ID: "ev-4", MessageID: "nobody", Outcome: "DELAYED"}, backends.ErrNotFound},
		{"with a used id", backends.Event{ID: "ev-3", MessageID: "ev-msg", Outcome: "DELAYED"}, backends.ErrDuplicate},
	} {
		if err := s.AddEvent(ctx, &tc.e); !errors.Is(err, tc.want) {
			t.Errorf("AddEvent %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if _, err := s.Events(ctx, "nobody"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("Events of an unknown message: %v", err)
	}
	if es, _ := s.Events(ctx, "ev-msg"); len(es) != 2 {
		t.Errorf("refused events were recorded: %+v", es)
	}
}

// testEventWithoutID: an event needs its id, the key plugins drop
// duplicates by; without one nothing is recorded.
func testEventWithoutID(t *testing.T, s eventStore) {
	ctx := context.Background()
	sent(t, s, "ev-msg", "ev-1")
	if err := s.AddEvent(ctx, &backends.Event{MessageID: "ev-msg", Outcome: "DELAYED"}); err == nil || !strings.Contains(err.Error(), "no id") {
		t.Errorf("AddEvent without an id: %v", err)
	}
	walk(t, s, "ev-refused", backends.StatusReady)
	err := s.Transition(ctx, backends.Transition{ID: "ev-refused", From: backends.StatusReady, To: backends.StatusFailed, Reason: "x",
		Event: &backends.Event{Outcome: "FAILED"}})
	if err == nil || !strings.Contains(err.Error(), "no id") {
		t.Errorf("a transition with an event without an id: %v", err)
	}
	if m, _ := s.Get(ctx, "ev-refused"); m == nil || m.Status != backends.StatusReady {
		t.Errorf("a refused transition moved the message: %+v", m)
	}
	if es, _ := s.Events(ctx, "ev-msg"); len(es) != 1 {
		t.Errorf("refused events were recorded: %+v", es)
	}
}

func testEventOrder(t *testing.T, s eventStore) {
	ctx := context.Background()
	sent(t, s, "order-a", "a1")
	if err := s.AddEvent(ctx, &backends.Event{ID: "a2", MessageID: "order-a", Outcome: "DELAYED", At: at(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	sent(t, s, "order-b", "b1")

	now := at(2 * time.Hour)
	if got := claimEvents(t, s, now); !slices.Equal(got, []string{"a1", "b1"}) {
		t.Fatalf("first claim %v, want [a1 b1]: one event per message, in order", got)
	}
	if m := mustGet(t, s, "order-a"); m.Status != backends.StatusCallingSent {
		t.Errorf("message of a claimed SENT event is %s", m.Status)
	}
	h, _ := s.History(ctx, "order-a")
	if last := h[len(h)-1]; last.Status != backends.StatusCallingSent || last.Reason != "calling test plugins" {
		t.Errorf("history %+v", last)
	}
	if got := claimEvents(t, s, now); len(got) != 0 {
		t.Fatalf("claim while a1 is calling: %v", got)
	}
	e := updateEvent(t, s, backends.EventUpdate{ID: "a1", From: backends.EventCalling, To: backends.EventAcked, At: now,
		Acked: []string{"webhook"}, Reason: "acknowledged by webhook"})
	if e.State != backends.EventAcked || fmt.Sprint(e.Acked) != "[webhook]" {
		t.Errorf("acked event %+v", e)
	}
	m := mustGet(t, s, "order-a")
	if m.Status != backends.StatusSentAcknowledged || m.Reason != "delivered" {
		t.Errorf("message after the ack: %s %q", m.Status, m.Reason)
	}
	if got := claimEvents(t, s, now); !slices.Equal(got, []string{"a2"}) {
		t.Fatalf("claim after a1 acked: %v, want [a2]", got)
	}
	if m := mustGet(t, s, "order-a"); m.Status != backends.StatusSentAcknowledged {
		t.Errorf("a notice moved the message to %s", m.Status)
	}
	updateEvent(t, s, backends.EventUpdate{ID: "a2", From: backends.EventCalling, To: backends.EventAcked, At: now})

	if _, err := s.UpdateEvent(ctx, backends.EventUpdate{ID: "a2", From: backends.EventCalling, To: backends.EventAcked}); !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Errorf("update from a stale state: %v", err)
	}
	if _, err := s.UpdateEvent(ctx, backends.EventUpdate{ID: "a2", From: backends.EventAcked, To: backends.EventPending}); !errors.Is(err, backends.ErrInvalidTransition) {
		t.Errorf("update from acked: %v", err)
	}
	if _, err := s.UpdateEvent(ctx, backends.EventUpdate{ID: "zz", From: backends.EventCalling, To: backends.EventAcked}); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("update of an unknown event: %v", err)
	}

	// Invalid messages have their own callback statuses.
	walk(t, s, "order-invalid", backends.StatusIntaking)
	err := s.Transition(ctx, backends.Transition{ID: "order-invalid", From: backends.StatusIntaking, To: backends.StatusInvalid, At: now,
		Reason: "bad MIME", Event: &backends.Event{ID: "i1", Outcome: "INVALID", Reason: "bad MIME"}})
	if err != nil {
		t.Fatal(err)
	}
	claimEvents(t, s, now)
	if m := mustGet(t, s, "order-invalid"); m.Status != backends.StatusCallingInvalid {
		t.Errorf("invalid message is %s", m.Status)
	}
}

func testEventRetryAndPark(t *testing.T, s eventStore) {
	ctx := context.Background()
	sent(t, s, "retry-msg", "r1")
	now := at(2 * time.Hour)
	claimEvents(t, s, now)
	later := now.Add(time.Minute)
	e := updateEvent(t, s, backends.EventUpdate{ID: "r1", From: backends.EventCalling, To: backends.EventPending, At: now,
		AddAttempt: true, DueAt: later, LastError: "webhook: 503", Reason: "webhook failed: 503; next try at later"})
	if e.Attempts != 1 || !e.DueAt.Equal(later) || e.LastError != "webhook: 503" || !e.LeaseUntil.IsZero() {
		t.Errorf("event after a failure %+v", e)
	}
	if m := mustGet(t, s, "retry-msg"); m.Status != backends.StatusSent {
		t.Errorf("message waiting for a retry is %s", m.Status)
	}
	h, _ := s.History(ctx, "retry-msg")
	if last := h[len(h)-1]; last.Status != backends.StatusSent || !strings.Contains(last.Reason, "webhook failed") {
		t.Errorf("the failed try is not in the history: %+v", last)
	}
	if got := claimEvents(t, s, now); len(got) != 0 {
		t.Errorf("claim before the retry is due: %v", got)
	}
	if got := claimEvents(t, s, later); !slices.Equal(got, []string{"r1"}) {
		t.Fatalf("claim when due: %v", got)
	}
	updateEvent(t, s, backends.EventUpdate{ID: "r1", From: backends.EventCalling, To: backends.EventParked, At: later,
		AddAttempt: true, LastError: "webhook: 503", Reason: "parked after 2 tries"})
	if err := s.AddEvent(ctx, &backends.Event{ID: "r2", MessageID: "retry-msg", Outcome: "DELAYED", At: later}); err != nil {
		t.Fatal(err)
	}
	parked, err := s.EventsByState(ctx, backends.EventParked, 10)
	if err != nil || len(parked) != 1 || parked[0].ID != "r1" || parked[0].Attempts != 2 {
		t.Errorf("parked events %+v, %v", parked, err)
	}
	if got := claimEvents(t, s, later.Add(time.Hour)); len(got) != 0 {
		t.Errorf("a parked event was claimed, or one behind it: %v", got)
	}
	updateEvent(t, s, backends.EventUpdate{ID: "r1", From: backends.EventParked, To: backends.EventPending, At: later, Reason: "replayed"})
	if got := claimEvents(t, s, later.Add(time.Hour)); !slices.Equal(got, []string{"r1"}) {
		t.Errorf("claim after the replay: %v", got)
	}
	if parked, _ := s.EventsByState(ctx, backends.EventParked, 10); len(parked) != 0 {
		t.Errorf("still parked: %+v", parked)
	}
}

func testEventRestore(t *testing.T, s eventStore) {
	ctx := context.Background()
	sent(t, s, "restore-ev", "re1")
	now := at(2 * time.Hour)
	claimEvents(t, s, now) // lease until now+1m
	if n, err := s.Restore(ctx, now.Add(30*time.Second)); err != nil || n != 0 {
		t.Errorf("restore before the lease ends: %d, %v", n, err)
	}
	if n, err := s.Restore(ctx, now.Add(2*time.Minute)); err != nil || n == 0 {
		t.Fatalf("restore after the lease: %d, %v", n, err)
	}
	es, _ := s.Events(ctx, "restore-ev")
	if es[0].State != backends.EventPending {
		t.Errorf("restored event %+v", es[0])
	}
	if m := mustGet(t, s, "restore-ev"); m.Status != backends.StatusSent {
		t.Errorf("restored message %s", m.Status)
	}
	if got := claimEvents(t, s, time.Now().Add(time.Hour)); !slices.Equal(got, []string{"re1"}) {
		t.Errorf("claim after restore: %v", got)
	}
	// Purging the message takes its events along.
	updateEvent(t, s, backends.EventUpdate{ID: "re1", From: backends.EventCalling, To: backends.EventAcked})
	if _, err := s.Purge(ctx, time.Now().Add(time.Hour), 10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Events(ctx, "restore-ev"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("events of a purged message: %v", err)
	}
}

func testConcurrentEventClaimers(t *testing.T, s eventStore) {
	ctx := context.Background()
	const msgs = 20
	for i := range msgs {
		id := fmt.Sprintf("cev-%02d", i)
		sent(t, s, id, id+"-1")
		if err := s.AddEvent(ctx, &backends.Event{ID: id + "-2", MessageID: id, Outcome: "DELAYED", At: at(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			for range 50 {
				now := at(2 * time.Hour)
				es, err := s.ClaimEvents(ctx, backends.EventClaim{Now: now, LeaseUntil: now.Add(time.Hour), Limit: 3})
				if err != nil {
					t.Error(err)
					return
				}
				for _, e := range es {
					mu.Lock()
					seen[e.ID]++
					mu.Unlock()
					if strings.HasSuffix(e.ID, "-2") {
						first, _ := s.Events(ctx, e.MessageID)
						if first[0].State != backends.EventAcked {
							t.Errorf("%s was claimed while %s was %s", e.ID, first[0].ID, first[0].State)
						}
					}
					if _, err := s.UpdateEvent(ctx, backends.EventUpdate{ID: e.ID, From: backends.EventCalling, To: backends.EventAcked}); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != 2*msgs {
		t.Errorf("%d events claimed, want %d", len(seen), 2*msgs)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s claimed %d times", id, n)
		}
	}
	for i := range msgs {
		es, _ := s.Events(ctx, fmt.Sprintf("cev-%02d", i))
		for _, e := range es {
			if e.State != backends.EventAcked {
				t.Errorf("%s is %s", e.ID, e.State)
			}
		}
	}
}

// testBounceAfterSent: a bounce recorded while the SENT callback runs waits
// its turn, then takes the message through BOUNCED; a second recipient's
// bounce takes it through again.
func testBounceAfterSent(t *testing.T, s eventStore) {
	ctx := context.Background()
	sent(t, s, "bnc", "bnc-sent")
	now := at(2 * time.Hour)
	if got := claimEvents(t, s, now); !slices.Equal(got, []string{"bnc-sent"}) {
		t.Fatalf("claim %v", got)
	}
	bounce := func(id, rcpt string) {
		t.Helper()
		err := s.AddEvent(ctx, &backends.Event{ID: id, MessageID: "bnc", Outcome: string(backends.StatusBounced), Reason: rcpt + ": 550 5.1.1 user unknown",
			At: now, Details: json.RawMessage(`{"recipient":"` + rcpt + `"}`)})
		if err != nil {
			t.Fatal(err)
		}
	}
	bounce("bnc-1", "a@example.net")
	if got := claimEvents(t, s, now); len(got) != 0 {
		t.Fatalf("a bounce was claimed while the SENT callback runs: %v", got)
	}
	if m := mustGet(t, s, "bnc"); m.Status != backends.StatusCallingSent {
		t.Errorf("the bounce moved the message to %s before its turn", m.Status)
	}
	updateEvent(t, s, backends.EventUpdate{ID: "bnc-sent", From: backends.EventCalling, To: backends.EventAcked, At: now, Reason: "acknowledged"})
	if got := claimEvents(t, s, now); !slices.Equal(got, []string{"bnc-1"}) {
		t.Fatalf("claim after SENT acked: %v", got)
	}
	if m := mustGet(t, s, "bnc"); m.Status != backends.StatusCallingBounced {
		t.Errorf("message of a claimed bounce is %s", m.Status)
	}
	// The message says why it bounced, in its reason and its BOUNCED row,
	// not who calls the plugins about it.
	if m := mustGet(t, s, "bnc"); m.Reason != "a@example.net: 550 5.1.1 user unknown" {
		t.Errorf("reason of a bounced message is %q", m.Reason)
	}
	if h, _ := s.History(ctx, "bnc"); len(h) < 2 || h[len(h)-2].Status != backends.StatusBounced || h[len(h)-2].Reason != "a@example.net: 550 5.1.1 user unknown" {
		t.Errorf("history ends %+v, want the BOUNCED row with the bounce's reason", h[max(0, len(h)-2):])
	}
	updateEvent(t, s, backends.EventUpdate{ID: "bnc-1", From: backends.EventCalling, To: backends.EventAcked, At: now, Reason: "acknowledged"})
	if m := mustGet(t, s, "bnc"); m.Status != backends.StatusBouncedAcknowledged {
		t.Errorf("message after the bounce's ack is %s", m.Status)
	}
	bounce("bnc-2", "b@example.org")
	claimEvents(t, s, now)
	updateEvent(t, s, backends.EventUpdate{ID: "bnc-2", From: backends.EventCalling, To: backends.EventAcked, At: now, Reason: "acknowledged"})
	h, _ := s.History(ctx, "bnc")
	var tail []backends.Status
	for _, e := range h[len(h)-6:] {
		tail = append(tail, e.Status)
	}
	want := []backends.Status{backends.StatusBounced, backends.StatusCallingBounced, backends.StatusBouncedAcknowledged,
		backends.StatusBounced, backends.StatusCallingBounced, backends.StatusBouncedAcknowledged}
	if !slices.Equal(tail, want) {
		t.Errorf("history ends %v, want %v", tail, want)
	}
	if err := s.AddEvent(ctx, &backends.Event{ID: "bnc-1", MessageID: "bnc", Outcome: string(backends.StatusBounced)}); !errors.Is(err, backends.ErrDuplicate) {
		t.Errorf("the same bounce twice: %v", err)
	}
}

// testEventsWaitingBehind: events that wait behind an earlier one of their
// message, however many and however early they fall due, never keep a
// claim from the events first in line. (A claim that looked only at the
// first Limit due events returned nothing once that many waited: the
// dispatcher stalled for good, since a retried event falls due later.)
func testEventsWaitingBehind(t *testing.T, s eventStore) {
	ctx := context.Background()
	const waiting, limit = 30, 2
	for i := range waiting {
		id := fmt.Sprintf("behind-%d", i)
		sent(t, s, id, id+"-sent")
		// The SENT event is retried later; a notice waits behind it, due
		// before it.
		claimEvents(t, s, at(2*time.Hour))
		updateEvent(t, s, backends.EventUpdate{ID: id + "-sent", From: backends.EventCalling, To: backends.EventPending,
			At: at(2 * time.Hour), DueAt: at(5 * time.Hour), AddAttempt: true})
		if err := s.AddEvent(ctx, &backends.Event{ID: id + "-delay", MessageID: id, Outcome: "DELAYED", At: at(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	sent(t, s, "ready-msg", "ready-sent") // first in line, due at(1h)
	got, err := s.ClaimEvents(ctx, backends.EventClaim{Now: at(3 * time.Hour), LeaseUntil: at(4 * time.Hour), Limit: limit})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ID != "ready-sent" {
		t.Errorf("claim with %d events waiting behind others: %v, want [ready-sent]", waiting, eventIDs(got))
	}
	if got, _ := s.ClaimEvents(ctx, backends.EventClaim{Now: at(6 * time.Hour), LeaseUntil: at(7 * time.Hour), Limit: 100}); len(got) != waiting {
		t.Errorf("once the retries are due: %v, want the %d SENT events", eventIDs(got), waiting)
	}
}

func eventIDs(es []*backends.Event) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.ID
	}
	return out
}
