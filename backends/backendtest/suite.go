// Package backendtest is the conformance suite of the outbox contract. Every
// store runs it unchanged from its own tests:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T) backends.Outbox { return openStore(t) })
//	}
package backendtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

// Opener gives a subtest a store of its own, empty, closed by the subtest's
// cleanup.
type Opener func(t *testing.T) backends.Outbox

// Run runs the whole suite against the stores open returns.
func Run(t *testing.T, open Opener) {
	tests := []struct {
		name string
		fn   func(*testing.T, backends.Outbox)
	}{
		{"CreateAndGet", testCreateAndGet},
		{"Duplicate", testDuplicate},
		{"ConcurrentDuplicates", testConcurrentDuplicates},
		{"NotFound", testNotFound},
		{"Transitions", testTransitions},
		{"LockNotAcquired", testLockNotAcquired},
		{"TransitionFields", testTransitionFields},
		{"HistoryOrder", testHistoryOrder},
		{"Chain", testChain},
		{"ClaimOrder", testClaimOrder},
		{"ClaimNotDue", testClaimNotDue},
		{"SuspendedBatches", testSuspendedBatches},
		{"LeaseRestore", testLeaseRestore},
		{"ConcurrentClaimers", testConcurrentClaimers},
		{"ConcurrentTransitions", testConcurrentTransitions},
		{"Retention", testRetention},
		{"ByMessageID", testByMessageID},
		{"ListPaging", testListPaging},
		{"Counts", testCounts},
		{"EventWithTransition", testEventWithTransition},
		{"EventOrder", testEventOrder},
		{"EventRetryAndPark", testEventRetryAndPark},
		{"EventRestore", testEventRestore},
		{"ConcurrentEventClaimers", testConcurrentEventClaimers},
		{"BounceAfterSent", testBounceAfterSent},
		{"Links", testLinks},
		{"Cursor", testCursor},
		{"ConcurrentCursorClaims", testConcurrentCursorClaims},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, open(t))
		})
	}
}

// base is the suite's clock: whole microseconds, which every store keeps.
var base = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

func newMessage(id string) *backends.Message {
	return &backends.Message{
		ID:        id,
		MessageID: id + "@test.example",
		Priority:  backends.PriorityNormal,
		Reason:    "accepted for test",
		EmlPath:   "spool/" + id + ".eml",
		CreatedAt: base,
		Envelope: backends.Envelope{
			Sender:     "app@example.com",
			Recipients: []string{"a@example.net", "b@example.org"},
			ClientAddr: "127.0.0.1:40000",
			Helo:       "app.local",
			AuthUser:   "app",
			ReceivedAt: base,
			Size:       1234,
			Control:    map[string]string{"X-Postino-Priority": "2"},
		},
	}
}

func create(t *testing.T, s backends.Outbox, m *backends.Message) *backends.Message {
	t.Helper()
	if err := s.Create(context.Background(), m); err != nil {
		t.Fatalf("Create(%s): %v", m.ID, err)
	}
	return m
}

func mustGet(t *testing.T, s backends.Outbox, id string) *backends.Message {
	t.Helper()
	m, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return m
}

func move(t *testing.T, s backends.Outbox, id string, from, to backends.Status, now time.Time) *backends.Message {
	t.Helper()
	tr := backends.Transition{ID: id, From: from, To: to, At: now, Reason: fmt.Sprintf("%s to %s", from, to)}
	if to.Working() {
		tr.LeaseUntil = now.Add(time.Minute)
	}
	if err := s.Transition(context.Background(), tr); err != nil {
		t.Fatalf("Transition(%s, %s -> %s): %v", id, from, to, err)
	}
	return mustGet(t, s, id)
}

// path finds the shortest way from ACCEPTED to a status.
func path(to backends.Status) []backends.Status {
	prev := map[backends.Status]backends.Status{backends.StatusAccepted: ""}
	queue := []backends.Status{backends.StatusAccepted}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			break
		}
		for _, next := range backends.Statuses() {
			if _, seen := prev[next]; !seen && backends.CanTransition(cur, next) {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	var out []backends.Status
	for s := to; s != ""; s = prev[s] {
		out = append([]backends.Status{s}, out...)
	}
	return out
}

// walk creates a message and moves it along the path to status.
func walk(t *testing.T, s backends.Outbox, id string, status backends.Status) *backends.Message {
	t.Helper()
	m := create(t, s, newMessage(id))
	p := path(status)
	if p[0] != backends.StatusAccepted || p[len(p)-1] != status {
		t.Fatalf("no path from ACCEPTED to %s", status)
	}
	for i := 1; i < len(p); i++ {
		m = move(t, s, id, p[i-1], p[i], at(time.Duration(i)*time.Second))
	}
	return m
}

func testCreateAndGet(t *testing.T, s backends.Outbox) {
	want := newMessage("create-1")
	want.Batch = "campaign-1"
	want.Priority = backends.PriorityHigh
	want.DueAt = at(time.Hour)
	create(t, s, want)

	got := mustGet(t, s, "create-1")
	if got.Status != backends.StatusAccepted {
		t.Errorf("status = %s, want ACCEPTED", got.Status)
	}
	if got.Version < 0 || got.Attempts != 0 {
		t.Errorf("version %d attempts %d: want version >= 0 and no attempts", got.Version, got.Attempts)
	}
	checks := []struct {
		field     string
		got, want any
	}{
		{"MessageID", got.MessageID, want.MessageID},
		{"Priority", got.Priority, want.Priority},
		{"Batch", got.Batch, want.Batch},
		{"Reason", got.Reason, want.Reason},
		{"EmlPath", got.EmlPath, want.EmlPath},
		{"Sender", got.Envelope.Sender, want.Envelope.Sender},
		{"Recipients", fmt.Sprint(got.Envelope.Recipients), fmt.Sprint(want.Envelope.Recipients)},
		{"ClientAddr", got.Envelope.ClientAddr, want.Envelope.ClientAddr},
		{"Helo", got.Envelope.Helo, want.Envelope.Helo},
		{"AuthUser", got.Envelope.AuthUser, want.Envelope.AuthUser},
		{"Size", got.Envelope.Size, want.Envelope.Size},
		{"Control", fmt.Sprint(got.Envelope.Control), fmt.Sprint(want.Envelope.Control)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
		}
	}
	for _, c := range []struct {
		field     string
		got, want time.Time
	}{
		{"CreatedAt", got.CreatedAt, base},
		{"DueAt", got.DueAt, at(time.Hour)},
		{"ReceivedAt", got.Envelope.ReceivedAt, base},
	} {
		if !c.got.Equal(c.want) {
			t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
		}
	}
	h, err := s.History(context.Background(), "create-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 1 || h[0].Status != backends.StatusAccepted || h[0].Reason != want.Reason {
		t.Errorf("history after create = %+v, want one ACCEPTED row with the reason", h)
	}
}

func testDuplicate(t *testing.T, s backends.Outbox) {
	create(t, s, newMessage("dup-1"))
	second := newMessage("dup-1")
	second.EmlPath = "spool/other.eml"
	err := s.Create(context.Background(), second)
	if !errors.Is(err, backends.ErrDuplicate) {
		t.Fatalf("second Create = %v, want ErrDuplicate", err)
	}
	if got := mustGet(t, s, "dup-1"); got.EmlPath != "spool/dup-1.eml" {
		t.Errorf("duplicate overwrote the row: eml path %s", got.EmlPath)
	}
}

func testConcurrentDuplicates(t *testing.T, s backends.Outbox) {
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := newMessage("race-1")
			m.EmlPath = fmt.Sprintf("spool/race-%d.eml", i)
			errs[i] = s.Create(context.Background(), m)
		}()
	}
	wg.Wait()
	created := 0
	for _, err := range errs {
		switch {
		case err == nil:
			created++
		case !errors.Is(err, backends.ErrDuplicate):
			t.Errorf("Create: %v", err)
		}
	}
	if created != 1 {
		t.Errorf("%d concurrent Creates of one id succeeded, want exactly 1", created)
	}
	h, err := s.History(context.Background(), "race-1")
	if err != nil || len(h) != 1 {
		t.Errorf("history = %v, %v: want one row", h, err)
	}
}

func testNotFound(t *testing.T, s backends.Outbox) {
	ctx := context.Background()
	if _, err := s.Get(ctx, "missing"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("Get = %v, want ErrNotFound", err)
	}
	if _, err := s.History(ctx, "missing"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("History = %v, want ErrNotFound", err)
	}
	err := s.Transition(ctx, backends.Transition{ID: "missing", From: backends.StatusAccepted, To: backends.StatusInvalid})
	if !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("Transition = %v, want ErrNotFound", err)
	}
}

func testTransitions(t *testing.T, s backends.Outbox) {
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

func testLockNotAcquired(t *testing.T, s backends.Outbox) {
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

func testTransitionFields(t *testing.T, s backends.Outbox) {
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

func testHistoryOrder(t *testing.T, s backends.Outbox) {
	walk(t, s, "hist-1", backends.StatusFailedAcknowledged)
	h, err := s.History(context.Background(), "hist-1")
	if err != nil {
		t.Fatal(err)
	}
	var got []backends.Status
	for _, e := range h {
		got = append(got, e.Status)
	}
	if want := path(backends.StatusFailedAcknowledged); !slices.Equal(got, want) {
		t.Errorf("history %v, want %v", got, want)
	}
	for i := 1; i < len(h); i++ {
		if h[i].At.Before(h[i-1].At) {
			t.Errorf("history row %d at %v is before row %d at %v", i, h[i].At, i-1, h[i-1].At)
		}
	}
}

// ready creates a READY message with the given priority, due time and age.
func ready(t *testing.T, s backends.Outbox, id string, prio int, due, created time.Time, batch string) {
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

func claimIDs(t *testing.T, s backends.Outbox, now time.Time, limit int) []string {
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

func testClaimOrder(t *testing.T, s backends.Outbox) {
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

func testClaimNotDue(t *testing.T, s backends.Outbox) {
	ready(t, s, "later", backends.PriorityImmediate, at(time.Hour), at(0), "")
	ready(t, s, "now", backends.PriorityLow, at(0), at(0), "")
	if got := claimIDs(t, s, at(time.Minute), 10); !slices.Equal(got, []string{"now"}) {
		t.Errorf("claim before due %v, want [now]", got)
	}
	if got := claimIDs(t, s, at(time.Hour), 10); !slices.Equal(got, []string{"later"}) {
		t.Errorf("claim at due %v, want [later]", got)
	}
}

func testSuspendedBatches(t *testing.T, s backends.Outbox) {
	ctx := context.Background()
	ready(t, s, "b1-a", backends.PriorityImmediate, at(0), at(0), "campaign")
	ready(t, s, "other", backends.PriorityNormal, at(0), at(0), "")
	if err := s.SuspendBatch(ctx, "campaign"); err != nil {
		t.Fatal(err)
	}
	// A message of the batch that becomes READY while it is suspended waits too.
	ready(t, s, "b1-b", backends.PriorityImmediate, at(0), at(time.Second), "campaign")
	codes, err := s.SuspendedBatches(ctx)
	if err != nil || !slices.Equal(codes, []string{"campaign"}) {
		t.Errorf("SuspendedBatches = %v, %v", codes, err)
	}
	if got := claimIDs(t, s, at(time.Minute), 10); !slices.Equal(got, []string{"other"}) {
		t.Errorf("claim with the batch suspended %v, want [other]", got)
	}
	listed, _, err := s.List(ctx, backends.ListQuery{Status: backends.StatusReady, Limit: 10})
	if err != nil || len(listed) != 2 {
		t.Errorf("suspended messages must still be listed as READY: %d, %v", len(listed), err)
	}
	if n, _ := s.Counts(ctx); n[backends.StatusReady] != 2 {
		t.Errorf("READY count %d, want 2", n[backends.StatusReady])
	}
	if err := s.ActivateBatch(ctx, "campaign"); err != nil {
		t.Fatal(err)
	}
	if got := claimIDs(t, s, at(time.Minute), 10); !slices.Equal(got, []string{"b1-a", "b1-b"}) {
		t.Errorf("claim after activation %v, want [b1-a b1-b]", got)
	}
	if codes, _ := s.SuspendedBatches(ctx); len(codes) != 0 {
		t.Errorf("SuspendedBatches after activation = %v", codes)
	}
	if err := s.SuspendBatch(ctx, "bad code!"); err == nil {
		t.Error("SuspendBatch accepted an invalid code")
	}
}

func testLeaseRestore(t *testing.T, s backends.Outbox) {
	ctx := context.Background()
	cases := []struct {
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
	for _, c := range cases {
		p := path(c.working)
		create(t, s, newMessage(c.id))
		for i := 1; i < len(p); i++ {
			tr := backends.Transition{ID: c.id, From: p[i-1], To: p[i], At: at(0), Reason: "step " + string(p[i]), AddAttempt: p[i] == backends.StatusProcessing}
			if p[i].Working() {
				tr.LeaseUntil = at(time.Minute)
				tr.KeepReason = true
			}
			if err := s.Transition(ctx, tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	walk(t, s, "restore-fresh", backends.StatusIntaking) // lease until at(1s+1m): not expired below
	before := map[string]*backends.Message{}
	for _, c := range cases {
		before[c.id] = mustGet(t, s, c.id)
	}
	if n, err := s.Restore(ctx, at(30*time.Second)); err != nil || n != 0 {
		t.Errorf("Restore before the leases expire = %d, %v; want 0", n, err)
	}
	n, err := s.Restore(ctx, at(time.Minute+time.Second))
	if err != nil || n != len(cases) {
		t.Fatalf("Restore = %d, %v; want %d", n, err, len(cases))
	}
	for _, c := range cases {
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
	if got := mustGet(t, s, "restore-fresh").Status; got != backends.StatusIntaking {
		t.Errorf("a live lease was restored: %s", got)
	}
	// A restored message can be claimed again.
	ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: at(2 * time.Minute),
		LeaseUntil: at(3 * time.Minute), Limit: 10})
	if err != nil || len(ms) != 1 || ms[0].ID != "restore-processing" || ms[0].Attempts != 1 {
		t.Errorf("claim after restore = %v, %v", ms, err)
	}
}

func testConcurrentClaimers(t *testing.T, s backends.Outbox) {
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
func testConcurrentTransitions(t *testing.T, s backends.Outbox) {
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

func testRetention(t *testing.T, s backends.Outbox) {
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
	// A purged id may be used again.
	create(t, s, newMessage("old-ack"))
}

func testByMessageID(t *testing.T, s backends.Outbox) {
	ctx := context.Background()
	a := newMessage("mid-a")
	a.MessageID = "shared@example.com"
	a.CreatedAt = at(time.Second)
	b := newMessage("mid-b")
	b.MessageID = "shared@example.com"
	create(t, s, a)
	create(t, s, b)
	create(t, s, newMessage("mid-c"))
	ms, err := s.ByMessageID(ctx, "shared@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].ID != "mid-b" || ms[1].ID != "mid-a" {
		t.Errorf("ByMessageID = %v, want [mid-b mid-a]", ids(ms))
	}
	if ms, _ := s.ByMessageID(ctx, "nobody@example.com"); len(ms) != 0 {
		t.Errorf("ByMessageID of an unknown id = %v", ids(ms))
	}
}

func ids(ms []*backends.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func testListPaging(t *testing.T, s backends.Outbox) {
	ctx := context.Background()
	for i := range 7 {
		m := newMessage(fmt.Sprintf("list-%d", i))
		m.CreatedAt = at(time.Duration(i) * time.Second)
		create(t, s, m)
	}
	move(t, s, "list-3", backends.StatusAccepted, backends.StatusInvalid, at(time.Minute))

	collect := func(q backends.ListQuery) []string {
		var out []string
		for range 10 {
			page, next, err := s.List(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > q.Limit {
				t.Fatalf("page of %d for limit %d", len(page), q.Limit)
			}
			out = append(out, ids(page)...)
			if next == "" {
				return out
			}
			q.After = next
		}
		t.Fatal("listing never ended")
		return nil
	}
	got := collect(backends.ListQuery{Limit: 3})
	if want := []string{"list-6", "list-5", "list-4", "list-3", "list-2", "list-1", "list-0"}; !slices.Equal(got, want) {
		t.Errorf("all, newest first: %v, want %v", got, want)
	}
	got = collect(backends.ListQuery{Status: backends.StatusAccepted, Limit: 2})
	if want := []string{"list-0", "list-1", "list-2", "list-4", "list-5", "list-6"}; !slices.Equal(got, want) {
		t.Errorf("ACCEPTED: %v, want %v", got, want)
	}
	got = collect(backends.ListQuery{Status: backends.StatusInvalid, Limit: 2})
	if !slices.Equal(got, []string{"list-3"}) {
		t.Errorf("INVALID: %v", got)
	}
}

func testCounts(t *testing.T, s backends.Outbox) {
	ctx := context.Background()
	walk(t, s, "count-1", backends.StatusReady)
	walk(t, s, "count-2", backends.StatusReady)
	walk(t, s, "count-3", backends.StatusInvalid)
	create(t, s, newMessage("count-4"))
	n, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[backends.Status]int{backends.StatusReady: 2, backends.StatusInvalid: 1, backends.StatusAccepted: 1}
	for _, st := range backends.Statuses() {
		if n[st] != want[st] {
			t.Errorf("count of %s = %d, want %d", st, n[st], want[st])
		}
	}
}

func testChain(t *testing.T, s backends.Outbox) {
	ctx := context.Background()
	walk(t, s, "chain-1", backends.StatusProcessing)
	results := []backends.RecipientResult{
		{Address: "a@example.net", Status: backends.RecipientSent, Code: 250, Host: "mx.example.net", At: at(time.Hour)},
		{Address: "b@example.org", Status: backends.RecipientFailed, Code: 550, Enhanced: "5.1.1", Text: "no such user", At: at(time.Hour)},
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
}

// sent moves a fresh message to SENT with its SENT event.
func sent(t *testing.T, s backends.Outbox, id, eventID string) {
	t.Helper()
	walk(t, s, id, backends.StatusProcessing)
	err := s.Transition(context.Background(), backends.Transition{ID: id, From: backends.StatusProcessing, To: backends.StatusSent,
		At: at(time.Hour), Reason: "delivered",
		Event: &backends.Event{ID: eventID, Outcome: string(backends.StatusSent), Reason: "delivered", Details: json.RawMessage(`{"recipients":2}`)}})
	if err != nil {
		t.Fatal(err)
	}
}

func claimEvents(t *testing.T, s backends.Outbox, now time.Time) []string {
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

func updateEvent(t *testing.T, s backends.Outbox, u backends.EventUpdate) *backends.Event {
	t.Helper()
	e, err := s.UpdateEvent(context.Background(), u)
	if err != nil {
		t.Fatalf("UpdateEvent(%s %s -> %s): %v", u.ID, u.From, u.To, err)
	}
	return e
}

func testEventWithTransition(t *testing.T, s backends.Outbox) {
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

	if err := s.AddEvent(ctx, &backends.Event{ID: "ev-3", MessageID: "ev-msg", Outcome: "DELAYED", At: at(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	es, _ = s.Events(ctx, "ev-msg")
	if len(es) != 2 || es[1].ID != "ev-3" || es[1].Seq != 2 {
		t.Errorf("after AddEvent: %+v", es)
	}
	if err := s.AddEvent(ctx, &backends.Event{ID: "ev-4", MessageID: "nobody", Outcome: "DELAYED"}); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("AddEvent to an unknown message: %v", err)
	}
	if err := s.AddEvent(ctx, &backends.Event{ID: "ev-3", MessageID: "ev-msg", Outcome: "DELAYED"}); !errors.Is(err, backends.ErrDuplicate) {
		t.Errorf("AddEvent with a used id: %v", err)
	}
	if _, err := s.Events(ctx, "nobody"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("Events of an unknown message: %v", err)
	}
	if err := s.AddEvent(ctx, &backends.Event{MessageID: "ev-msg", Outcome: "DELAYED"}); err == nil || !strings.Contains(err.Error(), "no id") {
		t.Errorf("AddEvent without an id: %v", err)
	}
	err = s.Transition(ctx, backends.Transition{ID: "ev-refused", From: backends.StatusReady, To: backends.StatusFailed, Reason: "x",
		Event: &backends.Event{Outcome: "FAILED"}})
	if err == nil || !strings.Contains(err.Error(), "no id") {
		t.Errorf("a transition with an event without an id: %v", err)
	}
	if m, _ := s.Get(ctx, "ev-refused"); m == nil || m.Status != backends.StatusReady {
		t.Errorf("a refused transition moved the message: %+v", m)
	}
	if es, _ := s.Events(ctx, "ev-msg"); len(es) != 2 {
		t.Errorf("refused events were recorded: %+v", es)
	}
}

func testEventOrder(t *testing.T, s backends.Outbox) {
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

func testEventRetryAndPark(t *testing.T, s backends.Outbox) {
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

func testEventRestore(t *testing.T, s backends.Outbox) {
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

func testConcurrentEventClaimers(t *testing.T, s backends.Outbox) {
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
func testBounceAfterSent(t *testing.T, s backends.Outbox) {
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

func testCursor(t *testing.T, s backends.Outbox) {
	ctx := context.Background()
	now := time.Now().UTC()
	c, err := s.ClaimCursor(ctx, "imap://bounces@mail.example.com/INBOX", "relay-a", now.Add(time.Minute))
	if err != nil || c.UIDValidity != 0 || c.LastUID != 0 || c.Owner != "relay-a" {
		t.Fatalf("first claim: %+v %v", c, err)
	}
	if err := s.SaveCursor(ctx, "imap://bounces@mail.example.com/INBOX", "relay-a", backends.Cursor{UIDValidity: 7, LastUID: 42}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimCursor(ctx, "imap://bounces@mail.example.com/INBOX", "relay-b", now.Add(time.Minute)); !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Errorf("claim of a held cursor: %v", err)
	}
	if err := s.SaveCursor(ctx, "imap://bounces@mail.example.com/INBOX", "relay-b", backends.Cursor{UIDValidity: 7, LastUID: 99}); !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Errorf("save by another owner: %v", err)
	}
	c, err = s.ClaimCursor(ctx, "imap://bounces@mail.example.com/INBOX", "relay-a", now.Add(2*time.Minute))
	if err != nil || c.UIDValidity != 7 || c.LastUID != 42 || c.LeaseUntil.Sub(now.Add(2*time.Minute)).Abs() > time.Millisecond {
		t.Errorf("renewal: %+v %v", c, err)
	}
	// Another name is another cursor.
	if c, err := s.ClaimCursor(ctx, "imap://bounces@mail.example.com/Other", "relay-b", now.Add(time.Minute)); err != nil || c.LastUID != 0 {
		t.Errorf("another folder: %+v %v", c, err)
	}
	// Once the lease ran out another relay takes over where the first stopped.
	if err := s.SaveCursor(ctx, "imap://bounces@mail.example.com/INBOX", "relay-a", backends.Cursor{UIDValidity: 7, LastUID: 43}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimCursor(ctx, "imap://bounces@mail.example.com/INBOX", "relay-a", now.Add(-time.Second)); err != nil {
		t.Fatal(err) // the owner lets its lease lapse
	}
	c, err = s.ClaimCursor(ctx, "imap://bounces@mail.example.com/INBOX", "relay-b", now.Add(time.Minute))
	if err != nil || c.LastUID != 43 || c.Owner != "relay-b" {
		t.Errorf("takeover: %+v %v", c, err)
	}
	if err := s.SaveCursor(ctx, "imap://bounces@mail.example.com/INBOX", "relay-a", backends.Cursor{UIDValidity: 7, LastUID: 50}); !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Errorf("save by the owner that lost the lease: %v", err)
	}
	if _, err := s.ClaimCursor(ctx, "", "relay-a", now); err == nil {
		t.Error("an empty cursor name was accepted")
	}
}

func testConcurrentCursorClaims(t *testing.T, s backends.Outbox) {
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	var won atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_, err := s.ClaimCursor(ctx, "race", fmt.Sprintf("relay-%d", i), until)
			switch {
			case err == nil:
				won.Add(1)
			case !errors.Is(err, backends.ErrLockNotAcquired):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Errorf("%d relays hold the cursor, want 1", won.Load())
	}
}

func testLinks(t *testing.T, s backends.Outbox) {
	ctx := context.Background()
	walk(t, s, "linked", backends.StatusSentAcknowledged)
	walk(t, s, "other", backends.StatusSentAcknowledged)
	if err := s.Link(ctx, "opec275.20261121@pec.example.it", "linked"); err != nil {
		t.Fatal(err)
	}
	if id, err := s.Linked(ctx, "opec275.20261121@pec.example.it"); err != nil || id != "linked" {
		t.Errorf("Linked: %q %v", id, err)
	}
	// A second receipt links the same key again: the first link stays.
	if err := s.Link(ctx, "opec275.20261121@pec.example.it", "linked"); err != nil {
		t.Errorf("the same link again: %v", err)
	}
	if err := s.Link(ctx, "opec275.20261121@pec.example.it", "other"); err != nil {
		t.Errorf("a key linked to another message: %v", err)
	}
	if id, _ := s.Linked(ctx, "opec275.20261121@pec.example.it"); id != "linked" {
		t.Errorf("the first link was replaced by %q", id)
	}
	if _, err := s.Linked(ctx, "nobody@pec.example.it"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("an unknown key: %v", err)
	}
	if err := s.Link(ctx, "k", "no-such-message"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("a link to no message: %v", err)
	}
	if err := s.Link(ctx, "", "linked"); err == nil {
		t.Error("an empty key was accepted")
	}
	if _, err := s.Purge(ctx, time.Now(), 100); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Linked(ctx, "opec275.20261121@pec.example.it"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("a link outlived its purged message: %v", err)
	}
}
