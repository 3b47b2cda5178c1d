package intake_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/relay/intake"
	"github.com/genropy/postino/relay/suppression"
)

func TestWorker(t *testing.T) {
	sp, store := outboxtest.Open(t)

	later := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	tests := []struct {
		id      string
		file    string // under testdata; empty for a missing file
		due     time.Time
		created time.Time
		sender  string
		status  backends.Status
		reason  string
	}{
		{id: "plain", file: "plain.eml", status: backends.StatusReady, reason: "ready for route default"},
		{id: "later", file: "plain.eml", due: later, status: backends.StatusReady, reason: "not before"},
		{id: "multipart", file: "multipart-ok.eml", status: backends.StatusReady},
		{id: "unclosed", file: "multipart-unclosed.eml", status: backends.StatusInvalid, reason: "MIME part 1.2 is malformed"},
		{id: "no-boundary", file: "multipart-no-boundary.eml", status: backends.StatusInvalid, reason: "malformed"},
		{id: "deep", file: "multipart-deep.eml", status: backends.StatusInvalid, reason: "nested more than"},
		// A file that cannot be read is no reason to end the message: it
		// stays for its lease to bring it back, until its maximum age.
		{id: "missing", status: backends.StatusIntaking},
		{id: "missing-for-days", created: time.Now().Add(-6 * 24 * time.Hour), status: backends.StatusInvalid,
			reason: "expired: its file could not be read for 120h0m0s: spool: message file"},
		{id: "unroutable", file: "plain.eml", sender: "nobody@nowhere.example", status: backends.StatusInvalid, reason: "no route for"},
	}
	for _, tt := range tests {
		sender := tt.sender
		if sender == "" {
			sender = "app@example.com"
		}
		m := &backends.Message{ID: tt.id, DueAt: tt.due, Priority: 2, CreatedAt: tt.created,
			Envelope: backends.Envelope{Sender: sender, Recipients: []string{"b@example.net"}}}
		if tt.file == "" {
			m.EmlPath = "20260101/0000/" + tt.id + ".000000000000.eml"
			if err := store.Create(context.Background(), m); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(filepath.Join("testdata", tt.file))
		if err != nil {
			t.Fatal(err)
		}
		outboxtest.Add(t, sp, store, m, b)
	}
	route := func(m *backends.Message) (string, error) {
		if strings.HasSuffix(m.Envelope.Sender, "@nowhere.example") {
			return "", errors.New("no route for " + m.Envelope.Sender)
		}
		return "default", nil
	}
	w := intake.NewWorker(intake.WorkerConfig{Concurrency: 3, Lease: time.Minute, Poll: 10 * time.Millisecond, Owner: "test",
		MaxAge: 5 * 24 * time.Hour}, store, sp, route, slog.New(slog.NewTextHandler(io.Discard, nil)))
	stop := run(w)
	outboxtest.WaitCounts(t, store, 60*time.Second, func(n map[backends.Status]int) bool {
		return n[backends.StatusAccepted] == 0 && n[backends.StatusIntaking] == 1 && n[backends.StatusReady]+n[backends.StatusInvalid] == len(tests)-1
	})
	stop()

	for _, tt := range tests {
		m, err := store.Get(context.Background(), tt.id)
		if err != nil {
			t.Fatal(err)
		}
		if m.Status != tt.status || !strings.Contains(m.Reason, tt.reason) {
			t.Errorf("%s: %s %q, want %s with %q", tt.id, m.Status, m.Reason, tt.status, tt.reason)
		}
		if tt.status == backends.StatusReady && m.Route != "default" {
			t.Errorf("%s: route %q", tt.id, m.Route)
		}
		if !tt.due.IsZero() && !m.DueAt.Equal(tt.due) {
			t.Errorf("%s: due %v, want %v", tt.id, m.DueAt, tt.due)
		}
		want := "ACCEPTED INTAKING"
		if tt.status != backends.StatusIntaking {
			want += " " + string(tt.status)
		}
		if got := outboxtest.History(t, store, tt.id); got != want {
			t.Errorf("%s: history %s, want %s", tt.id, got, want)
		}
	}
	if n, last := sp.Unreadable(); n != 2 || last == nil || !strings.Contains(last.Path, "missing") {
		t.Errorf("unreadable files counted %d, last %+v; want the two missing", n, last)
	}
}

// slowCommits is an outbox whose commits take long: each Transition waits
// until all the expected ones are waiting together, as they would for one
// shared commit, or gives up.
type slowCommits struct {
	*bolt.Store
	want    int
	mu      sync.Mutex
	waiting int
	all     chan struct{}
	gaveUp  atomic.Bool
}

func (s *slowCommits) Transition(ctx context.Context, t backends.Transition) error {
	s.mu.Lock()
	s.waiting++
	if s.waiting == s.want {
		close(s.all)
	}
	s.mu.Unlock()
	if !s.gaveUp.Load() {
		select {
		case <-s.all:
		case <-time.After(15 * time.Second):
			s.gaveUp.Store(true)
		}
	}
	return s.Store.Transition(ctx, t)
}

// The records of a batch must not wait for one another: with one checking
// slot, a worker that recorded inside the slot would pay one commit per
// message.
func TestWorkerRecordsShareCommits(t *testing.T) {
	sp, store := outboxtest.Open(t)
	const n = 8
	for i := range n {
		outboxtest.Add(t, sp, store, &backends.Message{ID: fmt.Sprintf("m%d", i), Priority: 2,
			Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{"b@example.net"}}},
			[]byte("From: app@example.com\r\nSubject: hi\r\n\r\nhello\r\n"))
	}
	slow := &slowCommits{Store: store, want: n, all: make(chan struct{})}
	w := intake.NewWorker(intake.WorkerConfig{Concurrency: 1, Lease: time.Minute, Poll: time.Hour, Owner: "test"},
		slow, sp, func(*backends.Message) (string, error) { return "default", nil },
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	stop := run(w)
	outboxtest.WaitCounts(t, store, time.Minute, func(counts map[backends.Status]int) bool {
		return counts[backends.StatusReady] == n
	})
	stop()
	if slow.gaveUp.Load() {
		t.Errorf("the %d records of one batch were not made together", n)
	}
}

// A message handed over by the relay that accepted it goes to READY, or
// INVALID, in one move with no claim; one another worker claimed first is
// left to that worker.
func TestWorkerAccepted(t *testing.T) {
	sp, bs := outboxtest.Open(t)
	store := outboxtest.CountClaims(bs, "")
	w := intake.NewWorker(intake.WorkerConfig{Concurrency: 2, Lease: time.Minute, Poll: time.Hour, Owner: "test"},
		store, sp, func(*backends.Message) (string, error) { return "default", nil },
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer run(w)()
	if n := <-store.Took; n != 0 {
		t.Fatalf("the first claim took %d messages from an empty outbox", n)
	}

	add := func(id, body string) *backends.Message {
		m := &backends.Message{ID: id, Priority: 2,
			Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{"b@example.net"}}}
		outboxtest.Add(t, sp, store, m, []byte(body))
		return m
	}
	// Another relay's worker claims this one before it is handed over.
	taken := add("taken", "Subject: hi\r\n\r\nhello\r\n")
	now := time.Now().UTC()
	if got, err := bs.Claim(context.Background(), backends.Claim{From: backends.StatusAccepted, To: backends.StatusIntaking,
		Now: now, LeaseUntil: now.Add(time.Hour), Limit: 10, Reason: "claimed by another"}); err != nil || len(got) != 1 {
		t.Fatalf("claim by another: %d messages, %v", len(got), err)
	}
	want := map[string]string{"taken": "ACCEPTED INTAKING"}
	w.Accepted(taken)
	for i := range 20 {
		id := fmt.Sprintf("m%d", i)
		w.Accepted(add(id, "Subject: hi\r\n\r\nhello\r\n"))
		want[id] = "ACCEPTED READY"
	}
	w.Accepted(add("broken", "MIME-Version: 1.0\r\nContent-Type: multipart/mixed\r\n\r\nno boundary\r\n"))
	want["broken"] = "ACCEPTED INVALID"
	outboxtest.WaitCounts(t, bs, time.Minute, func(n map[backends.Status]int) bool {
		return n[backends.StatusReady] == 20 && n[backends.StatusInvalid] == 1
	})
	for id, statuses := range want {
		if got := outboxtest.History(t, bs, id); got != statuses {
			t.Errorf("%s: history %s, want %s", id, got, statuses)
		}
	}
	if m, err := bs.Get(context.Background(), "m0"); err != nil || m.Route != "default" || m.Reason != "ready for route default" {
		t.Errorf("m0: %+v, %v; want routed and ready", m, err)
	}
	select {
	case n := <-store.Took:
		t.Errorf("the worker claimed again (%d messages) for messages handed over", n)
	default:
	}
}

// A claim that took less than it asked for found every message waiting:
// the worker does not claim again until woken or its poll.
func TestWorkerPartialClaimIsLast(t *testing.T) {
	sp, bs := outboxtest.Open(t)
	for i := range 3 {
		outboxtest.Add(t, sp, bs, &backends.Message{ID: fmt.Sprintf("m%d", i), Priority: 2,
			Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{"b@example.net"}}},
			[]byte("Subject: hi\r\n\r\nhello\r\n"))
	}
	store := outboxtest.CountClaims(bs, "")
	w := intake.NewWorker(intake.WorkerConfig{Concurrency: 2, Lease: time.Minute, Poll: time.Hour, Owner: "test"},
		store, sp, func(*backends.Message) (string, error) { return "default", nil },
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	stop := run(w)
	outboxtest.WaitCounts(t, bs, time.Minute, func(n map[backends.Status]int) bool { return n[backends.StatusReady] == 3 })
	stop()
	if n := len(store.Took); n != 1 {
		t.Errorf("%d claims for 3 messages waiting, want 1", n)
	}
}

// refusedMoves is an outbox that counts the moves it refuses for a status
// the message had left.
type refusedMoves struct {
	*outboxtest.Claims
	refused atomic.Int32
}

func (s *refusedMoves) Transition(ctx context.Context, t backends.Transition) error {
	err := s.Claims.Transition(ctx, t)
	if errors.Is(err, backends.ErrLockNotAcquired) {
		s.refused.Add(1)
	}
	return err
}

// A message both handed over and claimable is prepared once: what waits
// in the inbox goes before a claim, and a copy that arrives after a claim
// took its message is dropped.
func TestWorkerPreparesOnce(t *testing.T) {
	sp, bs := outboxtest.Open(t)
	store := &refusedMoves{Claims: outboxtest.CountClaims(bs, "")}
	w := intake.NewWorker(intake.WorkerConfig{Concurrency: 2, Lease: time.Minute, Poll: time.Hour, Owner: "test"},
		store, sp, func(*backends.Message) (string, error) { return "default", nil },
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	add := func(id string) *backends.Message {
		m := &backends.Message{ID: id, Priority: 2, Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{"b@example.net"}}}
		outboxtest.Add(t, sp, bs, m, []byte("Subject: hi\r\n\r\nhello\r\n"))
		return m
	}
	// Handed over before the worker's first claim.
	w.Accepted(add("early"))
	// Claimed by the first claim, its copy handed over after.
	late := add("late")
	defer run(w)()
	if n := <-store.Took; n != 1 {
		t.Fatalf("the first claim took %d messages, want late alone", n)
	}
	w.Accepted(late)
	w.Accepted(add("after"))
	outboxtest.WaitCounts(t, bs, time.Minute, func(n map[backends.Status]int) bool { return n[backends.StatusReady] == 3 })
	if n := store.refused.Load(); n != 0 {
		t.Errorf("%d moves refused: a message was prepared twice", n)
	}
	for id, want := range map[string]string{"early": "ACCEPTED READY", "late": "ACCEPTED INTAKING READY", "after": "ACCEPTED READY"} {
		if got := outboxtest.History(t, bs, id); got != want {
			t.Errorf("%s: history %s, want %s", id, got, want)
		}
	}
}

// run runs w until the returned stop, which waits for it to end.
func run(w *intake.Worker) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// TestWorkerHoldsBack: the worker marks the recipients the suppression
// list holds back for the message's stream; a message with none left ends
// SUPPRESSED, with its event, and one of another stream is not held.
func TestWorkerHoldsBack(t *testing.T) {
	sp, store := outboxtest.Open(t)
	ctx := context.Background()
	policy := suppression.New(suppression.Config{Streams: map[string]suppression.Stream{"news": {}}, By: "test"}, store)
	if _, err := policy.Unsubscribe(ctx, "news", "gone@example.net", suppression.Evidence{}, time.Now()); err != nil {
		t.Fatal(err)
	}
	body := []byte("From: app@example.com\r\nSubject: hi\r\n\r\nhello\r\n")
	for _, m := range []*backends.Message{
		{ID: "some", Envelope: backends.Envelope{Recipients: []string{"gone@example.net", "b@example.net"}, Control: map[string]string{suppression.HeaderStream: "news"}}},
		{ID: "all", Envelope: backends.Envelope{Recipients: []string{"gone@EXAMPLE.net"}, Control: map[string]string{suppression.HeaderStream: "news"}}},
		{ID: "other-stream", Envelope: backends.Envelope{Recipients: []string{"gone@example.net"}}},
	} {
		m.Priority, m.Envelope.Sender = 2, "app@example.com"
		outboxtest.Add(t, sp, store, m, body)
	}
	w := intake.NewWorker(intake.WorkerConfig{Concurrency: 3, Lease: time.Minute, Poll: 10 * time.Millisecond, Owner: "test",
		MaxAge: time.Hour, Holds: policy}, store, sp, func(*backends.Message) (string, error) { return "default", nil },
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	stop := run(w)
	outboxtest.WaitCounts(t, store, 60*time.Second, func(n map[backends.Status]int) bool {
		return n[backends.StatusReady] == 2 && n[backends.StatusSuppressed] == 1
	})
	stop()
	some, _ := store.Get(ctx, "some")
	if len(some.Results) != 2 || some.Results[0].Status != "suppressed" || some.Results[1].Status != "pending" {
		t.Errorf("some: %+v", some.Results)
	}
	all, _ := store.Get(ctx, "all")
	evs, _ := store.Events(ctx, "all")
	if all.Status != backends.StatusSuppressed || len(evs) != 1 || evs[0].Outcome != "SUPPRESSED" || !strings.Contains(all.Reason, "unsubscribe") {
		t.Errorf("all: %s %q, events %+v", all.Status, all.Reason, evs)
	}
	if other, _ := store.Get(ctx, "other-stream"); len(other.Results) != 0 {
		t.Errorf("a transactional message was held back by an unsubscribe from news: %+v", other.Results)
	}
}
