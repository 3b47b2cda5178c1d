package backendtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/outcome"
)

var queueTests = []test[messageStore]{
	{"Transitions", testTransitions},
	{"LockNotAcquired", testLockNotAcquired},
	{"TransitionFields", testTransitionFields},
	{"Chain", testChain},
	{"ClaimOrder", testClaimOrder},
	{"ClaimNotDue", testClaimNotDue},
	{"CancelKeepsSendAfter", testCancelKeepsSendAfter},
	{"LeaseRestore", testLeaseRestore},
	{"ConcurrentClaimers", testConcurrentClaimers},
	{"ConcurrentTransitions", testConcurrentTransitions},
	{"Retention", testRetention},
}

func testTransitions(t *testing.T, s messageStore) {
	ctx := context.Background()
	for fi, from := range backends.Statuses() {
		for ti, to := range backends.Statuses() {
			id := fmt.Sprintf("tr-%02d-%02d", fi, ti)
			walk(t, s, id, from)
			tr := backends.Transition{ID: id, From: from, To: to, At: at(time.Hour), Reason: "test move"}
			if to.Working() {
				tr.LeaseUntil = at(2 * time.Hour)
			}
			err := s.Transition(ctx, tr)
			if backends.CanTransition(from, to) {
				if err != nil {
					t.Errorf("%s -> %s: %v, want it allowed", from, to, err)
					continue
				}
				if mustGet(t, s, id).Status != to {
					t.Errorf("%s -> %s: status is %s", from, to, mustGet(t, s, id).Status)
				}
				continue
			}
			if !errors.Is(err, backends.ErrInvalidTransition) {
				t.Errorf("%s -> %s: %v, want ErrInvalidTransition", from, to, err)
			}
			if got := mustGet(t, s, id).Status; got != from {
				t.Errorf("%s -> %s refused but the status became %s", from, to, got)
			}
		}
	}
}

func testLockNotAcquired(t *testing.T, s messageStore) {
	ctx := context.Background()
	walk(t, s, "lock-1", backends.StatusReady)
	before := mustGet(t, s, "lock-1")
	err := s.Transition(ctx, backends.Transition{ID: "lock-1", From: backends.StatusAccepted,
		To: backends.StatusIntaking, LeaseUntil: at(time.Hour)})
	if !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Fatalf("Transition from a stale status = %v, want ErrLockNotAcquired", err)
	}
	after := mustGet(t, s, "lock-1")
	if after.Status != backends.StatusReady || after.Version != before.Version {
		t.Errorf("refused transition changed the row: %s v%d -> %s v%d", before.Status, before.Version, after.Status, after.Version)
	}
	h, _ := s.History(ctx, "lock-1")
	if len(h) != len(path(backends.StatusReady)) {
		t.Errorf("refused transition wrote history: %d rows", len(h))
	}
}

func testTransitionFields(t *testing.T, s messageStore) {
	ctx := context.Background()
	walk(t, s, "fields-1", backends.StatusProcessing)
	v0 := mustGet(t, s, "fields-1").Version
	details := json.RawMessage(`{"recipients":[{"address":"a@example.net","code":451}]}`)
	err := s.Transition(ctx, backends.Transition{ID: "fields-1", From: backends.StatusProcessing, To: backends.StatusReady,
		At: at(time.Hour), Reason: "451 4.3.0 try later", Details: details, DueAt: at(2 * time.Hour), AddAttempt: true})
	if err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, s, "fields-1")
	if got.Attempts != 1 || got.Reason != "451 4.3.0 try later" || !got.DueAt.Equal(at(2*time.Hour)) ||
		!got.UpdatedAt.Equal(at(time.Hour)) || !got.LeaseUntil.IsZero() {
		t.Errorf("after retry: attempts %d reason %q due %v updated %v lease %v", got.Attempts, got.Reason, got.DueAt, got.UpdatedAt, got.LeaseUntil)
	}
	if got.Version != 0 && got.Version <= v0 {
		t.Errorf("version %d did not grow from %d", got.Version, v0)
	}
	h, _ := s.History(ctx, "fields-1")
	last := h[len(h)-1]
	var d, want any
	json.Unmarshal(last.Details, &d)
	json.Unmarshal(details, &want)
	if last.Status != backends.StatusReady || fmt.Sprint(d) != fmt.Sprint(want) {
		t.Errorf("last history row %+v, want READY with the details", last)
	}

	// KeepReason keeps the row's reason; the history still says why.
	err = s.Transition(ctx, backends.Transition{ID: "fields-1", From: backends.StatusReady, To: backends.StatusProcessing,
		At: at(3 * time.Hour), Reason: "claimed by test", KeepReason: true, LeaseUntil: at(4 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	got = mustGet(t, s, "fields-1")
	if got.Reason != "451 4.3.0 try later" || !got.LeaseUntil.Equal(at(4*time.Hour)) {
		t.Errorf("after claim: reason %q lease %v", got.Reason, got.LeaseUntil)
	}
	h, _ = s.History(ctx, "fields-1")
	if h[len(h)-1].Reason != "claimed by test" {
		t.Errorf("history reason %q", h[len(h)-1].Reason)
	}

	// A working status needs a lease.
	err = s.Transition(ctx, backends.Transition{ID: "fields-1", From: backends.StatusProcessing, To: backends.StatusReady, At: at(5 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Transition(ctx, backends.Transition{ID: "fields-1", From: backends.StatusReady, To: backends.StatusProcessing, At: at(5 * time.Hour)})
	if err == nil {
		t.Error("moving to PROCESSING without a lease succeeded")
	}
}

// ready creates a READY message with the given priority, due time and age.
func ready(t *testing.T, s messageStore, id string, prio int, due, created time.Time, batch string) {
	t.Helper()
	m := newMessage(id)
	m.Priority = prio
	m.CreatedAt = created
	m.Batch = batch
	create(t, s, m)
	move(t, s, id, backends.StatusAccepted, backends.StatusIntaking, created)
	err := s.Transition(context.Background(), backends.Transition{ID: id, From: backends.StatusIntaking,
		To: backends.StatusReady, At: created, DueAt: due, Reason: "prepared"})
	if err != nil {
		t.Fatal(err)
	}
}

func claimIDs(t *testing.T, s messageStore, now time.Time, limit int) []string {
	t.Helper()
	ms, err := s.Claim(context.Background(), backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing,
		Now: now, LeaseUntil: now.Add(time.Minute), Limit: limit, Reason: "claimed by test"})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
		if m.Status != backends.StatusProcessing {
			t.Errorf("claimed %s has status %s", m.ID, m.Status)
		}
	}
	return ids
}

func testClaimOrder(t *testing.T, s messageStore) {
	ready(t, s, "low-old", backends.PriorityLow, at(0), at(-time.Hour), "")
	ready(t, s, "normal-late", backends.PriorityNormal, at(2*time.Minute), at(-time.Hour), "")
	ready(t, s, "normal-early-young", backends.PriorityNormal, at(time.Minute), at(-time.Minute), "")
	ready(t, s, "normal-early-old", backends.PriorityNormal, at(time.Minute), at(-2*time.Minute), "")
	ready(t, s, "immediate", backends.PriorityImmediate, at(3*time.Minute), at(0), "")
	ready(t, s, "high", backends.PriorityHigh, at(3*time.Minute), at(0), "")

	got := claimIDs(t, s, at(10*time.Minute), 4)
	want := []string{"immediate", "high", "normal-early-old", "normal-early-young"}
	if !slices.Equal(got, want) {
		t.Errorf("first claim %v, want %v", got, want)
	}
	got = claimIDs(t, s, at(10*time.Minute), 10)
	if want := []string{"normal-late", "low-old"}; !slices.Equal(got, want) {
		t.Errorf("second claim %v, want %v", got, want)
	}
	if got := claimIDs(t, s, at(10*time.Minute), 10); len(got) != 0 {
		t.Errorf("third claim %v, want nothing", got)
	}
	h, _ := s.History(context.Background(), "high")
	if last := h[len(h)-1]; last.Status != backends.StatusProcessing || last.Reason != "claimed by test" {
		t.Errorf("claim history row %+v", last)
	}
}

func testClaimNotDue(t *testing.T, s messageStore) {
	ready(t, s, "later", backends.PriorityImmediate, at(time.Hour), at(0), "")
	ready(t, s, "now", backends.PriorityLow, at(0), at(0), "")
	if got := claimIDs(t, s, at(time.Minute), 10); !slices.Equal(got, []string{"now"}) {
		t.Errorf("claim before due %v, want [now]", got)
	}
	if got := claimIDs(t, s, at(time.Hour), 10); !slices.Equal(got, []string{"later"}) {
		t.Errorf("claim at due %v, want [later]", got)
	}
}

// testCancelKeepsSendAfter cancels a message that waits for its
// X-Postino-Send-After and retries it as an operator does: the message
// still knows the time the app asked for (in its envelope's control
// values), and waits for it again.
func testCancelKeepsSendAfter(t *testing.T, s messageStore) {
	ctx := context.Background()
	m := newMessage("scheduled")
	m.Envelope.Control = map[string]string{backends.HeaderSendAfter: at(time.Hour).Format(time.RFC3339)}
	m.DueAt = at(time.Hour)
	create(t, s, m)
	move(t, s, m.ID, backends.StatusAccepted, backends.StatusReady, at(0))
	got := move(t, s, m.ID, backends.StatusReady, backends.StatusFailed, at(time.Minute))
	if !got.SendAfter().Equal(at(time.Hour)) {
		t.Fatalf("a cancelled message's send-after is %s (control %v), want %s", got.SendAfter(), got.Envelope.Control, at(time.Hour))
	}
	if err := s.Transition(ctx, backends.Transition{ID: m.ID, From: backends.StatusFailed, To: backends.StatusReady,
		At: at(2 * time.Minute), DueAt: got.SendAfter(), Reason: "retry"}); err != nil {
		t.Fatal(err)
	}
	if got := claimIDs(t, s, at(30*time.Minute), 10); len(got) != 0 {
		t.Errorf("claim before its send-after took %v", got)
	}
	if got := claimIDs(t, s, at(time.Hour), 10); !slices.Equal(got, []string{m.ID}) {
		t.Errorf("claim at its send-after took %v, want [%s]", got, m.ID)
	}
}

// leaseCases are messages held in each working status, with the status
// their expired lease returns them to.
var leaseCases = []struct {
	id       string
	working  backends.Status
	previous backends.Status
}{
	{"restore-intaking", backends.StatusIntaking, backends.StatusAccepted},
	{"restore-processing", backends.StatusProcessing, backends.StatusReady},
	{"restore-calling-sent", backends.StatusCallingSent, backends.StatusSent},
	{"restore-calling-failed", backends.StatusCallingFailed, backends.StatusFailed},
	{"restore-calling-invalid", backends.StatusCallingInvalid, backends.StatusInvalid},
}

// hold walks a new message to a working status, its lease until at(1m),
// counting an attempt on its way through PROCESSING.
func hold(t *testing.T, s messageStore, id string, working backends.Status) {
	t.Helper()
	p := path(working)
	create(t, s, newMessage(id))
	for i := 1; i < len(p); i++ {
		tr := backends.Transition{ID: id, From: p[i-1], To: p[i], At: at(0), Reason: "step " + string(p[i]), AddAttempt: p[i] == backends.StatusProcessing}
		if p[i].Working() {
			tr.LeaseUntil = at(time.Minute)
			tr.KeepReason = true
		}
		if err := s.Transition(context.Background(), tr); err != nil {
			t.Fatal(err)
		}
	}
}

func testLeaseRestore(t *testing.T, s messageStore) {
	ctx := context.Background()
	before := map[string]*backends.Message{}
	for _, c := range leaseCases {
		hold(t, s, c.id, c.working)
		before[c.id] = mustGet(t, s, c.id)
	}
	walk(t, s, "restore-fresh", backends.StatusIntaking) // lease until at(1s+1m): not expired below
	if n, err := s.Restore(ctx, at(30*time.Second)); err != nil || n != 0 {
		t.Errorf("Restore before the leases expire = %d, %v; want 0", n, err)
	}
	n, err := s.Restore(ctx, at(time.Minute+time.Second))
	if err != nil || n != len(leaseCases) {
		t.Fatalf("Restore = %d, %v; want %d", n, err, len(leaseCases))
	}
	checkRestored(t, s, before)
	if got := mustGet(t, s, "restore-fresh").Status; got != backends.StatusIntaking {
		t.Errorf("a live lease was restored: %s", got)
	}
	n2, _ := s.Counts(ctx)
	if n2[backends.StatusIntaking] != 1 || n2[backends.StatusProcessing] != 0 || n2[backends.StatusAccepted] != 1 || n2[backends.StatusReady] != 1 {
		t.Errorf("counts after the restore: %v", n2)
	}
	// A restored message can be claimed again.
	ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: at(2 * time.Minute),
		LeaseUntil: at(3 * time.Minute), Limit: 10})
	if err != nil || len(ms) != 1 || ms[0].ID != "restore-processing" || ms[0].Attempts != 1 {
		t.Errorf("claim after restore = %v, %v", ms, err)
	}
}

// checkRestored checks that each lease case went back to the status before
// its working one, keeping its reason and attempts, with a history row saying so.
func checkRestored(t *testing.T, s messageStore, before map[string]*backends.Message) {
	t.Helper()
	ctx := context.Background()
	for _, c := range leaseCases {
		got := mustGet(t, s, c.id)
		if got.Status != c.previous {
			t.Errorf("%s: restored to %s, want %s", c.id, got.Status, c.previous)
		}
		if got.Reason != before[c.id].Reason || got.Attempts != before[c.id].Attempts {
			t.Errorf("%s: reason %q attempts %d, want kept %q %d", c.id, got.Reason, got.Attempts, before[c.id].Reason, before[c.id].Attempts)
		}
		h, _ := s.History(ctx, c.id)
		if last := h[len(h)-1]; last.Status != c.previous || last.Reason == "" {
			t.Errorf("%s: restore history row %+v", c.id, last)
		}
	}
}

func testConcurrentClaimers(t *testing.T, s messageStore) {
	ctx := context.Background()
	const total, workers = 200, 8
	var wg sync.WaitGroup
	for i := range total {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := newMessage(fmt.Sprintf("conc-%03d", i))
			m.CreatedAt = at(time.Duration(i) * time.Millisecond)
			if err := s.Create(ctx, m); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	var mu sync.Mutex
	seen := map[string]int{}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusAccepted, To: backends.StatusIntaking,
					Now: at(time.Hour), LeaseUntil: at(2 * time.Hour), Limit: 7, Reason: "worker"})
				if err != nil {
					t.Error(err)
					return
				}
				if len(ms) == 0 {
					return
				}
				mu.Lock()
				for _, m := range ms {
					seen[m.ID]++
					// The delivery engine times its claim by the lease it gets back.
					if m.Status != backends.StatusIntaking || !m.LeaseUntil.Equal(at(2*time.Hour)) {
						t.Errorf("%s claimed as %s with lease %v", m.ID, m.Status, m.LeaseUntil)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != total {
		t.Errorf("%d messages claimed, want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s claimed %d times", id, n)
		}
	}
	if n, _ := s.Counts(ctx); n[backends.StatusIntaking] != total || n[backends.StatusAccepted] != 0 {
		t.Errorf("counts after claims: %v", n)
	}
}

// testConcurrentTransitions races writers that move the same messages from
// the same status: one wins each message, the others are refused, and the
// row, its history and the counts show the winner's move only.
func testConcurrentTransitions(t *testing.T, s messageStore) {
	ctx := context.Background()
	const total, racers = 40, 4
	for i := range total {
		create(t, s, newMessage(fmt.Sprintf("race-%02d", i)))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	won := map[string]string{}
	for i := range total {
		id := fmt.Sprintf("race-%02d", i)
		for r := range racers {
			wg.Go(func() {
				reason := fmt.Sprintf("racer %d", r)
				err := s.Transition(ctx, backends.Transition{ID: id, From: backends.StatusAccepted, To: backends.StatusIntaking,
					At: at(time.Minute), Reason: reason, LeaseUntil: at(time.Hour)})
				switch {
				case err == nil:
					mu.Lock()
					if prev, ok := won[id]; ok {
						t.Errorf("%s: both %s and %s moved it", id, prev, reason)
					}
					won[id] = reason
					mu.Unlock()
				case !errors.Is(err, backends.ErrLockNotAcquired):
					t.Errorf("%s, %s: %v", id, reason, err)
				}
			})
		}
	}
	wg.Wait()
	for i := range total {
		id := fmt.Sprintf("race-%02d", i)
		m := mustGet(t, s, id)
		h, err := s.History(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if m.Status != backends.StatusIntaking || m.Reason != won[id] || len(h) != 2 || h[1].Reason != won[id] {
			t.Errorf("%s: status %s, reason %q, history %+v; winner %q", id, m.Status, m.Reason, h, won[id])
		}
	}
	if n, _ := s.Counts(ctx); n[backends.StatusIntaking] != total || n[backends.StatusAccepted] != 0 {
		t.Errorf("counts after the race: %v", n)
	}
}

func testRetention(t *testing.T, s messageStore) {
	ctx := context.Background()
	walk(t, s, "old-ack", backends.StatusSentAcknowledged) // last change at(6s)
	walk(t, s, "old-failed-ack", backends.StatusFailedAcknowledged)
	walk(t, s, "old-sent", backends.StatusSent)
	walk(t, s, "old-ready", backends.StatusReady)
	m := create(t, s, newMessage("young-ack"))
	p := path(backends.StatusSentAcknowledged)
	for i := 1; i < len(p); i++ {
		move(t, s, m.ID, p[i-1], p[i], at(time.Hour))
	}

	purged, err := s.Purge(ctx, at(time.Minute), 100)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range purged {
		ids = append(ids, m.ID)
		if m.EmlPath == "" {
			t.Errorf("purged %s without its spool path", m.ID)
		}
	}
	slices.Sort(ids)
	if want := []string{"old-ack", "old-failed-ack"}; !slices.Equal(ids, want) {
		t.Errorf("purged %v, want %v", ids, want)
	}
	for _, id := range []string{"old-ack", "old-failed-ack"} {
		if _, err := s.Get(ctx, id); !errors.Is(err, backends.ErrNotFound) {
			t.Errorf("Get(%s) after purge = %v", id, err)
		}
		if _, err := s.History(ctx, id); !errors.Is(err, backends.ErrNotFound) {
			t.Errorf("History(%s) after purge = %v", id, err)
		}
		if ms, _ := s.ByMessageID(ctx, id+"@test.example"); len(ms) != 0 {
			t.Errorf("ByMessageID still finds purged %s", id)
		}
	}
	for _, id := range []string{"old-sent", "old-ready", "young-ack"} {
		mustGet(t, s, id)
	}
	if n, _ := s.Counts(ctx); n[backends.StatusSentAcknowledged] != 1 || n[backends.StatusFailedAcknowledged] != 0 || n[backends.StatusSent] != 1 {
		t.Errorf("counts after the purge: %v", n)
	}
	// A purged id may be used again.
	create(t, s, newMessage("old-ack"))
}

func testChain(t *testing.T, s messageStore) {
	ctx := context.Background()
	walk(t, s, "chain-1", backends.StatusProcessing)
	results := []outcome.Recipient{
		{Address: "a@example.net", Status: outcome.RecipientSent, Code: 250, Host: "mx.example.net", At: at(time.Hour)},
		{Address: "b@example.org", Status: outcome.RecipientFailed, Code: 550, EnhancedCode: "5.1.1", Text: "no such user", At: at(time.Hour)},
	}
	err := s.Transition(ctx, backends.Transition{ID: "chain-1", From: backends.StatusProcessing, To: backends.StatusSent,
		At: at(time.Hour), Reason: "delivered", AddAttempt: true, Results: results,
		Then: []backends.Step{{To: backends.StatusCallingSent, Reason: "no plugin"}, {To: backends.StatusSentAcknowledged, Reason: "no plugin"}}})
	if err != nil {
		t.Fatal(err)
	}
	m := mustGet(t, s, "chain-1")
	if m.Status != backends.StatusSentAcknowledged || !m.LeaseUntil.IsZero() || m.Attempts != 1 || m.Reason != "delivered" {
		t.Errorf("after the chain: %s lease %v attempts %d reason %q", m.Status, m.LeaseUntil, m.Attempts, m.Reason)
	}
	if got := fmt.Sprint(m.Results); got != fmt.Sprint(results) {
		t.Errorf("results %s, want %s", got, fmt.Sprint(results))
	}
	h, _ := s.History(ctx, "chain-1")
	var tail []backends.Status
	for _, e := range h[len(h)-3:] {
		tail = append(tail, e.Status)
	}
	if want := []backends.Status{backends.StatusSent, backends.StatusCallingSent, backends.StatusSentAcknowledged}; !slices.Equal(tail, want) {
		t.Errorf("history ends %v, want %v", tail, want)
	}
	n, _ := s.Counts(ctx)
	if n[backends.StatusSentAcknowledged] != 1 || n[backends.StatusSent] != 0 || n[backends.StatusCallingSent] != 0 || n[backends.StatusProcessing] != 0 {
		t.Errorf("counts %v", n)
	}
	if n, _ := s.Restore(ctx, at(1000*time.Hour)); n != 0 {
		t.Errorf("a lease was left behind by the chain: %d restored", n)
	}

	walk(t, s, "chain-2", backends.StatusProcessing)
	err = s.Transition(ctx, backends.Transition{ID: "chain-2", From: backends.StatusProcessing, To: backends.StatusSent,
		Then: []backends.Step{{To: backends.StatusFailedAcknowledged}}})
	if !errors.Is(err, backends.ErrInvalidTransition) {
		t.Errorf("a chain with a forbidden step: %v", err)
	}
	if got := mustGet(t, s, "chain-2").Status; got != backends.StatusProcessing {
		t.Errorf("the refused chain moved the message to %s", got)
	}
	testChainToDelivery(t, s)
}

// testChainToDelivery: the intake of the relay that accepted a message
// claims it for delivery in the same move (ACCEPTED, READY, PROCESSING
// under a lease). The lease is the delivery's: a claim of READY does not
// take the message, and the lease's end returns it to READY.
func testChainToDelivery(t *testing.T, s messageStore) {
	ctx := context.Background()
	walk(t, s, "chain-3", backends.StatusAccepted)
	lease := at(2 * time.Hour)
	err := s.Transition(ctx, backends.Transition{ID: "chain-3", From: backends.StatusAccepted, To: backends.StatusReady,
		At: at(time.Hour), Reason: "ready for route default", Route: "default", LeaseUntil: lease,
		Then: []backends.Step{{To: backends.StatusProcessing, Reason: "claimed for delivery"}}})
	if err != nil {
		t.Fatal(err)
	}
	m := mustGet(t, s, "chain-3")
	if m.Status != backends.StatusProcessing || !m.LeaseUntil.Equal(lease) || m.Route != "default" || m.Reason != "ready for route default" {
		t.Errorf("after the chain: %s lease %v route %q reason %q", m.Status, m.LeaseUntil, m.Route, m.Reason)
	}
	claimed, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: at(90 * time.Minute),
		LeaseUntil: at(3 * time.Hour), Limit: 10})
	if err != nil || len(claimed) != 0 {
		t.Errorf("a claim of READY took %d messages (%v); the chain's message is held", len(claimed), err)
	}
	if _, err := s.Restore(ctx, at(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got := mustGet(t, s, "chain-3").Status; got != backends.StatusReady {
		t.Errorf("after its lease the message is %s, want READY", got)
	}
}
