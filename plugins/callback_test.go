package plugins_test

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/plugins"
)

func TestCallbackDelivered(t *testing.T) {
	store := outboxtest.Store(t)
	spec, out := testPlugin(t, "ok")
	tests := []struct {
		outcome         backends.Status
		calling, acked  backends.Status
		previous        string
		attempts        int
		recipientStatus string
		code            int
	}{
		{backends.StatusSent, backends.StatusCallingSent, backends.StatusSentAcknowledged, "PROCESSING", 1, "sent", 250},
		{backends.StatusFailed, backends.StatusCallingFailed, backends.StatusFailedAcknowledged, "PROCESSING", 1, "failed", 550},
		{backends.StatusInvalid, backends.StatusCallingInvalid, backends.StatusInvalidAcknowledged, "INTAKING", 0, "pending", 0},
	}
	events := map[backends.Status]string{}
	for _, tt := range tests {
		events[tt.outcome] = seed(t, store, "m-"+string(tt.outcome), tt.outcome)
	}
	_, reg := run(t, store, 50*time.Millisecond, spec)
	outboxtest.WaitCounts(t, store, wait, func(n map[backends.Status]int) bool {
		return n[backends.StatusSentAcknowledged] == 1 && n[backends.StatusFailedAcknowledged] == 1 && n[backends.StatusInvalidAcknowledged] == 1
	})
	got := map[string]call{}
	for _, c := range calls(t, out) {
		if _, dup := got[c.MessageID]; dup {
			t.Errorf("%s was called twice", c.MessageID)
		}
		got[c.MessageID] = c
	}
	for _, tt := range tests {
		t.Run(string(tt.outcome), func(t *testing.T) {
			id := "m-" + string(tt.outcome)
			st, reasons := history(t, store, id)
			if want := []backends.Status{tt.outcome, tt.calling, tt.acked}; !slices.Equal(st[len(st)-3:], want) {
				t.Errorf("history %v, want it to end in %v", st, want)
			}
			if r := reasons[len(reasons)-2:]; r[0] != "calling plugins (plugins-test)" || r[1] != "acknowledged by test" {
				t.Errorf("reasons of the callback %q", r)
			}
			evs := waitEvents(t, store, id, backends.EventAcked)
			if len(evs) != 1 || evs[0].ID != events[tt.outcome] || !slices.Equal(evs[0].Acked, []string{"test"}) || evs[0].Attempts != 0 {
				t.Errorf("stored events %s", eventsText(evs))
			}
			c := got[id]
			if c.EventID != events[tt.outcome] || c.Outcome != string(tt.outcome) || c.RFC822MessageID != id+"@example.com" ||
				c.PreviousStatus != tt.previous || c.Reason != "seeded "+string(tt.outcome) || c.Attempts != tt.attempts ||
				c.Sender != "app@example.com" || c.Batch != "b1" || c.Priority != backends.PriorityNormal || c.DeliveryAttempt != 1 || c.At == "" {
				t.Errorf("the plugin got %+v", c.Event)
			}
			if len(c.Recipients) != 1 || c.Recipients[0].Address != "user@example.net" || c.Recipients[0].Status != tt.recipientStatus ||
				c.Recipients[0].Code != tt.code {
				t.Errorf("the plugin got recipients %+v", c.Recipients)
			}
		})
	}
	if n := metric(t, reg, "postino_plugin_calls_total", "test"); n != 3 {
		t.Errorf("postino_plugin_calls_total %v, want 3", n)
	}
	if n := metric(t, reg, "postino_plugin_call_seconds", "test"); n != 3 {
		t.Errorf("postino_plugin_call_seconds count %v, want 3", n)
	}
	if n := metric(t, reg, "postino_plugin_failures_total", "test"); n != 0 {
		t.Errorf("postino_plugin_failures_total %v, want 0", n)
	}
}

// addEvent records an event after delivery, as the bounce and PEC readers
// do; it returns its id.
func addEvent(t *testing.T, store interface {
	AddEvent(context.Context, *backends.Event) error
}, id string, outcome backends.Status, details map[string]any) string {
	t.Helper()
	e := backends.OutcomeEvent(backends.StatusSentAcknowledged, outcome, "added "+string(outcome), details)
	e.MessageID = id
	if err := store.AddEvent(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	return e.ID
}

func TestCallbackEventDetails(t *testing.T) {
	store := outboxtest.Store(t)
	spec, out := testPlugin(t, "ok")
	seed(t, store, "m1", backends.StatusSent)
	// The details of an event say what it adds; they may not say it is
	// another event, of another message or outcome.
	bounced := addEvent(t, store, "m1", backends.StatusBounced, map[string]any{
		"bounce":   map[string]any{"kind": "bounce", "type": "hard", "reporting_mta": "mx.example.net"},
		"event_id": "forged", "message_id": "other", "outcome": "FORGED", "delivery_attempt": 9,
	})
	run(t, store, 50*time.Millisecond, spec)
	waitEvents(t, store, "m1", backends.EventAcked)
	cs := calls(t, out)
	if len(cs) != 2 {
		t.Fatalf("%d calls, want 2", len(cs))
	}
	c := cs[1]
	if c.EventID != bounced || c.MessageID != "m1" || c.Outcome != "BOUNCED" || c.DeliveryAttempt != 1 || c.PreviousStatus != "SENT-ACKNOWLEDGED" {
		t.Errorf("the plugin got %+v", c.Event)
	}
	if c.Bounce == nil || c.Bounce.Kind != "bounce" || c.Bounce.Type != "hard" || c.Bounce.ReportingMTA != "mx.example.net" {
		t.Errorf("the plugin got bounce %+v", c.Bounce)
	}
	if st, _ := history(t, store, "m1"); st[len(st)-1] != backends.StatusBouncedAcknowledged {
		t.Errorf("history %v", st)
	}
}

// TestCallbackListEvents: the outcomes of the suppression list and the
// brake reach a plugin process with their details, by the JSON names the
// relay writes them under (relay/intake, relay/delivery, relay/unsubscribes.go,
// relay/brake): SUPPRESSED with the stream and the held recipients,
// UNSUBSCRIBED with the unsubscribe, BATCH-SUSPENDED with the counts and
// thresholds. A plugin that asks for the two notices gets those only.
func TestCallbackListEvents(t *testing.T) {
	store := outboxtest.Store(t)
	spec, out := testPlugin(t, "ok")
	notices, noticesOut := testPlugin(t, "ok", "TESTPLUGIN_OUTCOMES=unsubscribed,BATCH-SUSPENDED")
	notices.Name = "notices"
	ctx := context.Background()

	// held: every recipient on the list, held at intake.
	m := &backends.Message{ID: "held", MessageID: "held@example.com", Priority: backends.PriorityNormal, Batch: "news-47", EmlPath: "held.eml",
		Envelope: backends.Envelope{Sender: "news@example.com", Recipients: []string{"user@example.net"}}}
	if err := store.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	held := []outcome.Recipient{{Address: "user@example.net", Status: outcome.RecipientSuppressed,
		Text: "suppressed for stream news since 2026-11-20T09:00:00Z: unsubscribe"}}
	suppressed := backends.OutcomeEvent(backends.StatusIntaking, backends.StatusSuppressed, "not sent: every recipient is suppressed",
		map[string]any{"stream": "news", "recipients": held})
	for _, tr := range []backends.Transition{
		{ID: "held", From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: time.Now().Add(time.Hour)},
		{ID: "held", From: backends.StatusIntaking, To: backends.StatusSuppressed, Reason: suppressed.Reason, Results: held, Event: suppressed},
	} {
		if err := store.Transition(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}

	// sent: then its recipient unsubscribes, then its batch is suspended.
	// Notices have no previous status.
	seed(t, store, "sent", backends.StatusSent)
	unsub := outcome.Unsubscribe{Recipient: "user@example.net", Stream: "news", Via: "https",
		At: time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC)}
	susp := outcome.BatchSuspension{Batch: "b1", Reason: "hard verdicts 6.0% (12 of 200) over the 5.0% threshold", Sent: 200, Hard: 12, Complaints: 1,
		MinSent: 200, MaxHardRate: 0.05, MaxComplaintRate: 0.003}
	var ids []string
	for _, n := range []struct {
		outcome string
		details map[string]any
	}{
		{"UNSUBSCRIBED", map[string]any{"unsubscribe": unsub}},
		{"BATCH-SUSPENDED", map[string]any{"batch_suspension": susp}},
	} {
		e := backends.OutcomeEvent("", backends.Status(n.outcome), "added "+n.outcome, n.details)
		e.MessageID = "sent"
		if err := store.AddEvent(ctx, e); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, e.ID)
	}

	run(t, store, 50*time.Millisecond, spec, notices)
	waitEvents(t, store, "held", backends.EventAcked)
	waitEvents(t, store, "sent", backends.EventAcked)
	got := map[string]call{}
	for _, c := range calls(t, out) {
		got[c.EventID] = c
	}
	if len(got) != 4 {
		t.Fatalf("the plugin got %d events, want 4 (SUPPRESSED, SENT, UNSUBSCRIBED, BATCH-SUSPENDED)", len(got))
	}

	c := got[suppressed.ID]
	if c.Outcome != "SUPPRESSED" || c.PreviousStatus != "INTAKING" || c.Stream != "news" || c.Batch != "news-47" ||
		!reflect.DeepEqual(c.Recipients, held) || c.Unsubscribe != nil || c.BatchSuspension != nil {
		t.Errorf("SUPPRESSED: the plugin got %+v", c.Event)
	}
	c = got[ids[0]]
	if c.Outcome != "UNSUBSCRIBED" || c.MessageID != "sent" || c.PreviousStatus != "" || c.Unsubscribe == nil || !reflect.DeepEqual(*c.Unsubscribe, unsub) ||
		c.Stream != "" || c.BatchSuspension != nil {
		t.Errorf("UNSUBSCRIBED: the plugin got %+v (unsubscribe %+v)", c.Event, c.Unsubscribe)
	}
	c = got[ids[1]]
	if c.Outcome != "BATCH-SUSPENDED" || c.MessageID != "sent" || c.BatchSuspension == nil || *c.BatchSuspension != susp ||
		c.Unsubscribe != nil {
		t.Errorf("BATCH-SUSPENDED: the plugin got %+v (suspension %+v)", c.Event, c.BatchSuspension)
	}

	var wanted []string
	for _, c := range calls(t, noticesOut) {
		wanted = append(wanted, c.Outcome)
	}
	if !slices.Equal(wanted, []string{"UNSUBSCRIBED", "BATCH-SUSPENDED"}) {
		t.Errorf("the plugin that wants the notices got %v", wanted)
	}
	if st, _ := history(t, store, "held"); st[len(st)-1] != backends.StatusSuppressedAcknowledged {
		t.Errorf("history of held %v", st)
	}
}

// TestCallbackOrder fails every event's first two tries: a message's later
// events must wait for its earlier one all the same.
func TestCallbackOrder(t *testing.T) {
	store := outboxtest.Store(t)
	spec, out := testPlugin(t, "fail-twice")
	const messages = 4
	want := map[string][]string{}
	for i := range messages {
		id := fmt.Sprintf("m%d", i)
		want[id] = []string{
			seed(t, store, id, backends.StatusSent),
			addEvent(t, store, id, "DELAYED", nil),
			addEvent(t, store, id, backends.StatusBounced, nil),
			addEvent(t, store, id, "COMPLAINED", nil),
		}
	}
	run(t, store, 50*time.Millisecond, spec)
	for id := range want {
		waitEvents(t, store, id, backends.EventAcked)
	}
	got := map[string][]string{}
	for _, c := range calls(t, out) {
		got[c.MessageID] = append(got[c.MessageID], c.EventID)
	}
	for id, events := range want {
		// Each event is tried three times, and only once the one before it
		// has been acknowledged.
		var order []string
		for _, e := range events {
			order = append(order, e, e, e)
		}
		if !slices.Equal(got[id], order) {
			t.Errorf("%s: calls %v, want %v", id, got[id], order)
		}
	}
	outboxtest.WaitCounts(t, store, wait, func(n map[backends.Status]int) bool {
		return n[backends.StatusBouncedAcknowledged] == messages
	})
}

func TestCallbackWake(t *testing.T) {
	store := outboxtest.Store(t)
	spec, out := testPlugin(t, "ok")
	seed(t, store, "first", backends.StatusSent)
	// The poll never comes: only Wake tells of the second event.
	d, _ := run(t, store, time.Hour, spec)
	waitEvents(t, store, "first", backends.EventAcked)
	seed(t, store, "second", backends.StatusSent)
	d.Wake()
	waitEvents(t, store, "second", backends.EventAcked)
	if n := len(calls(t, out)); n != 2 {
		t.Errorf("%d calls, want 2", n)
	}
}

func TestCallbackOutcomes(t *testing.T) {
	for _, tt := range []struct {
		name     string
		env      []string
		outcomes []string
		wanted   backends.Status
	}{
		{"the plugin says", []string{"TESTPLUGIN_OUTCOMES=SENT"}, nil, backends.StatusSent},
		{"the configuration overrides", []string{"TESTPLUGIN_OUTCOMES=SENT"}, []string{"failed"}, backends.StatusFailed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := outboxtest.Store(t)
			spec, out := testPlugin(t, "ok", tt.env...)
			spec.Outcomes = tt.outcomes
			all, _ := testPlugin(t, "ok")
			all.Name = "all"
			for _, o := range []backends.Status{backends.StatusSent, backends.StatusFailed, backends.StatusInvalid} {
				seed(t, store, string(o), o)
			}
			run(t, store, 50*time.Millisecond, spec, all)
			outboxtest.WaitCounts(t, store, wait, func(n map[backends.Status]int) bool {
				return n[backends.StatusSentAcknowledged] == 1 && n[backends.StatusFailedAcknowledged] == 1 && n[backends.StatusInvalidAcknowledged] == 1
			})
			var got []string
			for _, c := range calls(t, out) {
				got = append(got, c.Outcome)
			}
			if !slices.Equal(got, []string{string(tt.wanted)}) {
				t.Errorf("the plugin was called for %v, want only %s", got, tt.wanted)
			}
			for _, o := range []backends.Status{backends.StatusSent, backends.StatusFailed, backends.StatusInvalid} {
				evs := waitEvents(t, store, string(o), backends.EventAcked)
				want := []string{"all"}
				if o == tt.wanted {
					want = []string{"test", "all"}
				}
				if !slices.Equal(evs[0].Acked, want) {
					t.Errorf("%s acknowledged by %v, want %v", o, evs[0].Acked, want)
				}
			}
		})
	}
}

func TestCallbackNobodyWants(t *testing.T) {
	store := outboxtest.Store(t)
	spec, out := testPlugin(t, "ok", "TESTPLUGIN_OUTCOMES=SENT")
	seed(t, store, "m1", backends.StatusFailed)
	run(t, store, 50*time.Millisecond, spec)
	outboxtest.WaitCounts(t, store, wait, func(n map[backends.Status]int) bool {
		return n[backends.StatusFailedAcknowledged] == 1
	})
	if cs := calls(t, out); len(cs) != 0 {
		t.Errorf("the plugin was called for %+v", cs)
	}
	if _, reasons := history(t, store, "m1"); reasons[len(reasons)-1] != "no plugin wants FAILED" {
		t.Errorf("history reasons %q", reasons)
	}
	if evs := waitEvents(t, store, "m1", backends.EventAcked); len(evs[0].Acked) != 0 {
		t.Errorf("acknowledged by %v", evs[0].Acked)
	}
}

// TestCallbackRetriesOnlyFailed: a plugin that acknowledged an event is
// not called again when another fails it.
func TestCallbackRetriesOnlyFailed(t *testing.T) {
	store := outboxtest.Store(t)
	good, goodOut := testPlugin(t, "ok")
	good.Name = "good"
	flaky, flakyOut := testPlugin(t, "fail-twice")
	flaky.Name = "flaky"
	seed(t, store, "m1", backends.StatusSent)
	run(t, store, 50*time.Millisecond, good, flaky)
	evs := waitEvents(t, store, "m1", backends.EventAcked)
	if n := len(calls(t, goodOut)); n != 1 {
		t.Errorf("the plugin that acknowledged was called %d times", n)
	}
	if n := len(calls(t, flakyOut)); n != 3 {
		t.Errorf("the failing plugin was called %d times, want 3", n)
	}
	if !slices.Equal(evs[0].Acked, []string{"good", "flaky"}) || evs[0].Attempts != 2 {
		t.Errorf("stored events %s", eventsText(evs))
	}
}

// TestPluginRetries: a plugin that fails, hangs past its timeout or dies
// during a call gets the same event again, after the retry schedule's wait,
// from a new process when it hung or died.
func TestPluginRetries(t *testing.T) {
	for _, tt := range []struct {
		mode    string
		timeout time.Duration
		calls   int
		failure string
	}{
		{"fail-twice", 0, 3, "plugin test: failing try "},
		{"hang-once", 2 * time.Second, 2, "plugin test: no answer within 2s; the plugin was restarted"},
		{"exit-once", 0, 2, "plugin test: the plugin died during the call"},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			store := outboxtest.Store(t)
			spec, out := testPlugin(t, tt.mode)
			if tt.timeout > 0 {
				spec.Timeout = tt.timeout
			}
			spec.Retry = backoff.Schedule{First: 100 * time.Millisecond, Max: time.Second}
			seed(t, store, "m1", backends.StatusSent)
			_, reg := run(t, store, 50*time.Millisecond, spec)
			outboxtest.WaitCounts(t, store, wait, func(n map[backends.Status]int) bool {
				return n[backends.StatusSentAcknowledged] == 1
			})
			events := calls(t, out)
			if len(events) != tt.calls {
				t.Fatalf("%d calls, want %d", len(events), tt.calls)
			}
			pids := map[int]bool{}
			for i, e := range events {
				pids[e.PID] = true
				if e.EventID != events[0].EventID {
					t.Errorf("a retry changed the event id: %s, %s", events[0].EventID, e.EventID)
				}
				if e.DeliveryAttempt != i+1 {
					t.Errorf("call %d is delivery attempt %d", i+1, e.DeliveryAttempt)
				}
				if i == 0 {
					continue
				}
				if gap, least := e.ReceivedAt.Sub(events[i-1].ReceivedAt), spec.Retry.Delay(i); gap < least {
					t.Errorf("try %d came %s after the one before; the schedule says %s", i+1, gap, least)
				}
			}
			if tt.mode != "fail-twice" && len(pids) < 2 {
				t.Errorf("the plugin was not restarted: one process for %d calls", len(events))
			}
			st, reasons := history(t, store, "m1")
			fails := 0
			for i, s := range st {
				if s == backends.StatusSent && strings.Contains(reasons[i], "plugin test") {
					fails++
					if !strings.HasPrefix(reasons[i], tt.failure) {
						t.Errorf("a failed try is told as %q, want %q", reasons[i], tt.failure)
					}
				}
			}
			if fails != tt.calls-1 {
				t.Errorf("%d failed tries in the history, want %d: %q", fails, tt.calls-1, reasons)
			}
			if evs := waitEvents(t, store, "m1", backends.EventAcked); evs[0].Attempts != tt.calls-1 {
				t.Errorf("event attempts %d", evs[0].Attempts)
			}
			if n := metric(t, reg, "postino_plugin_failures_total", "test"); n != float64(tt.calls-1) {
				t.Errorf("postino_plugin_failures_total %v, want %d", n, tt.calls-1)
			}
		})
	}
}

func TestEventParked(t *testing.T) {
	for _, tt := range []struct {
		name  string
		set   func(*plugins.Spec)
		calls int
	}{
		{"max attempts", func(s *plugins.Spec) { s.MaxAttempts = 2 }, 2},
		{"max age", func(s *plugins.Spec) { s.MaxAge = time.Millisecond }, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := outboxtest.Store(t)
			gate := closedGate(t)
			spec, out := testPlugin(t, "fail-while", "TESTPLUGIN_GATE="+gate)
			tt.set(&spec)
			id := seed(t, store, "m1", backends.StatusSent)
			d, reg := run(t, store, 50*time.Millisecond, spec)
			evs := waitEvents(t, store, "m1", backends.EventParked)
			if e := evs[0]; e.ID != id || e.Attempts != tt.calls || e.LastError != "plugin test: the gate is closed" {
				t.Errorf("parked event %s", eventsText(evs))
			}
			st, reasons := history(t, store, "m1")
			wantReason := fmt.Sprintf("parked after %d tries: plugin test: the gate is closed; replay it with postino events replay %s", tt.calls, id)
			if st[len(st)-1] != backends.StatusSent || reasons[len(reasons)-1] != wantReason {
				t.Errorf("a message whose event is parked is %s (%q); it must wait in SENT saying %q", st[len(st)-1], reasons[len(reasons)-1], wantReason)
			}
			for family, want := range map[string]int{"postino_plugin_calls_total": tt.calls, "postino_plugin_failures_total": tt.calls,
				"postino_plugin_call_seconds": tt.calls, "postino_events_parked_total": 1} {
				if n := metric(t, reg, family, ""); n != float64(want) {
					t.Errorf("%s %v, want %d", family, n, want)
				}
			}
			if n := len(calls(t, out)); n != tt.calls {
				t.Errorf("%d calls, want %d", n, tt.calls)
			}

			// A replay, as postino events replay makes it, calls the plugin again.
			if err := os.Remove(gate); err != nil {
				t.Fatal(err)
			}
			if _, err := store.UpdateEvent(context.Background(), backends.EventUpdate{ID: id, From: backends.EventParked, To: backends.EventPending}); err != nil {
				t.Fatal(err)
			}
			d.Wake()
			waitEvents(t, store, "m1", backends.EventAcked)
			if n := len(calls(t, out)); n != tt.calls+1 {
				t.Errorf("%d calls, want %d (the failures, then the replay)", n, tt.calls+1)
			}
		})
	}
}
