package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/internal/journal"
	"github.com/genropy/postino/internal/testrig/outboxtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func open(t *testing.T, path string, store journal.Store) *journal.Journal {
	t.Helper()
	j, err := journal.Open(path, store, journal.Options{Retry: backoff.Schedule{First: 10 * time.Millisecond, Max: 50 * time.Millisecond}, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// claimed puts a message in PROCESSING and returns the transition that
// records its delivery, naming the claim's lease.
func claimed(t *testing.T, s *bolt.Store, id string) backends.Transition {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC()
	if err := s.Create(ctx, &backends.Message{ID: id, EmlPath: id + ".eml",
		Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{"b@example.net"}}}); err != nil {
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
	ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now.Add(time.Second),
		LeaseUntil: now.Add(time.Minute), Limit: 1})
	if err != nil || len(ms) != 1 {
		t.Fatalf("claim: %v %v", ms, err)
	}
	return backends.Transition{ID: id, From: backends.StatusProcessing, To: backends.StatusSent, Reason: "delivered",
		Held: ms[0].LeaseUntil, AddAttempt: true,
		Event: backends.OutcomeEvent(backends.StatusProcessing, backends.StatusSent, "delivered", nil)}
}

// sentOnce checks that the message reached SENT once, with one event.
func sentOnce(t *testing.T, s *bolt.Store, id string) {
	t.Helper()
	ctx := context.Background()
	m, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != backends.StatusSent || m.Attempts != 1 {
		t.Errorf("%s is %s after %d attempts, want SENT after 1", id, m.Status, m.Attempts)
	}
	h, _ := s.History(ctx, id)
	sent := 0
	for _, e := range h {
		if e.Status == backends.StatusSent {
			sent++
		}
	}
	evs, _ := s.Events(ctx, id)
	if sent != 1 || len(evs) != 1 {
		t.Errorf("%s: %d SENT history rows and %d events, want 1 and 1", id, sent, len(evs))
	}
}

func waitEmpty(t *testing.T, j *journal.Journal) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for j.Len() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the journal still keeps %d outcomes", j.Len())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An outcome the outbox fails is kept and written again until it lands.
func TestKeptUntilItLands(t *testing.T) {
	store := &outboxtest.Hiccup{Store: outboxtest.Store(t)}
	j := open(t, filepath.Join(t.TempDir(), "outcomes.db"), store)
	defer j.Close()
	tr := claimed(t, store.Store, "m1")
	store.Failures.Store(5)
	if err := j.Write(context.Background(), tr); err != nil {
		t.Fatalf("Write = %v, want the outcome kept", err)
	}
	if j.Len() != 1 {
		t.Fatalf("the journal keeps %d outcomes, want 1", j.Len())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { j.Run(ctx); close(done) }()
	waitEmpty(t, j)
	cancel()
	<-done
	if n := store.Failures.Load(); n >= 0 {
		t.Errorf("the store failed %d writes fewer than asked", n+1)
	}
	sentOnce(t, store.Store, "m1")
}

// What the journal keeps survives a restart: the relay's next run writes it.
func TestKeptAcrossARestart(t *testing.T) {
	store := &outboxtest.Hiccup{Store: outboxtest.Store(t)}
	path := filepath.Join(t.TempDir(), "outcomes.db")
	j := open(t, path, store)
	tr := claimed(t, store.Store, "m1")
	store.Failures.Store(1 << 30)
	if err := j.Write(context.Background(), tr); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Replay(context.Background()); !errors.Is(err, outboxtest.ErrUnavailable) {
		t.Fatalf("Replay with the outbox down = %v, want its error", err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	store.Failures.Store(0)
	j = open(t, path, store)
	defer j.Close()
	if n, err := j.Replay(context.Background()); n != 1 || err != nil {
		t.Fatalf("Replay after the restart = %d, %v; want 1 written", n, err)
	}
	if j.Len() != 0 {
		t.Errorf("the journal still keeps %d outcomes", j.Len())
	}
	sentOnce(t, store.Store, "m1")
}

// An outcome kept while its claim's lease ran out and another claim took
// the message is refused by the outbox, and dropped: it must not overwrite
// the newer claim's work.
func TestStaleOutcomeDropped(t *testing.T) {
	store := &outboxtest.Hiccup{Store: outboxtest.Store(t)}
	j := open(t, filepath.Join(t.TempDir(), "outcomes.db"), store)
	defer j.Close()
	ctx := context.Background()
	tr := claimed(t, store.Store, "m1")
	store.Failures.Store(1)
	if err := j.Write(ctx, tr); err != nil {
		t.Fatal(err)
	}
	// The lease runs out; the message is restored and claimed again.
	if n, err := store.Restore(ctx, time.Now().Add(2*time.Minute)); n != 1 || err != nil {
		t.Fatalf("Restore = %d, %v", n, err)
	}
	later := time.Now().UTC().Add(3 * time.Minute)
	if ms, err := store.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing,
		Now: later, LeaseUntil: later.Add(time.Minute), Limit: 1}); err != nil || len(ms) != 1 {
		t.Fatalf("second claim: %v %v", ms, err)
	}
	if n, err := j.Replay(ctx); n != 0 || err != nil {
		t.Fatalf("Replay = %d, %v; want the stale outcome refused", n, err)
	}
	if j.Len() != 0 {
		t.Errorf("the refused outcome is still kept")
	}
	m, _ := store.Get(ctx, "m1")
	if m.Status != backends.StatusProcessing || !backends.SameLease(m.LeaseUntil, later.Add(time.Minute)) {
		t.Errorf("the newer claim was overwritten: %s until %s", m.Status, m.LeaseUntil)
	}
}

// A refusal is the caller's to know, and nothing is kept.
func TestRefusalNotKept(t *testing.T) {
	store := &outboxtest.Hiccup{Store: outboxtest.Store(t)}
	j := open(t, filepath.Join(t.TempDir(), "outcomes.db"), store)
	defer j.Close()
	tr := claimed(t, store.Store, "m1")
	tr.Held = tr.Held.Add(time.Second)
	if err := j.Write(context.Background(), tr); !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Fatalf("Write = %v, want ErrLockNotAcquired", err)
	}
	if j.Len() != 0 {
		t.Errorf("a refused outcome was kept")
	}
}

// An outcome the journal file refuses (here a key too long for bbolt) fails
// its own Write only: those kept in the same group commit are kept.
func TestOneRefusedKeepLosesNoOther(t *testing.T) {
	store := &outboxtest.Hiccup{Store: outboxtest.Store(t)}
	j := open(t, filepath.Join(t.TempDir(), "outcomes.db"), store)
	defer j.Close()
	store.Failures.Store(1 << 30)
	const n = 64
	errs := make([]error, 2*n)
	var wg sync.WaitGroup
	for i := range 2 * n {
		id := fmt.Sprintf("m%d", i)
		if i%2 == 1 {
			id = strings.Repeat("x", bbolt.MaxKeySize+1)
		}
		wg.Go(func() {
			errs[i] = j.Write(context.Background(), backends.Transition{ID: id, From: backends.StatusProcessing, To: backends.StatusSent})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 && err != nil {
			t.Errorf("Write of m%d = %v, want it kept", i, err)
		}
		if i%2 == 1 && err == nil {
			t.Errorf("Write of a key too long = nil, want the file's refusal")
		}
	}
	if j.Len() != n {
		t.Errorf("the journal keeps %d outcomes, want %d", j.Len(), n)
	}
}

// An outcome kept while the message's lease may have moved (a renewal
// whose answer was lost) lands under the lease the message holds.
func TestKeptUnderEveryCandidateLease(t *testing.T) {
	ctx := context.Background()
	store := &outboxtest.Hiccup{Store: outboxtest.Store(t)}
	j := open(t, filepath.Join(t.TempDir(), "outcomes.db"), store)
	defer j.Close()
	tr := claimed(t, store.Store, "m1")
	claimedUnder := tr.Held
	renewedTo := claimedUnder.Add(time.Minute)
	if got, err := store.Renew(ctx, backends.Renewal{IDs: []string{"m1"}, Status: backends.StatusProcessing,
		Held: claimedUnder, Until: renewedTo}); err != nil || len(got) != 1 {
		t.Fatalf("renew = %v, %v", got, err)
	}
	store.Failures.Store(1)
	if err := j.Write(ctx, tr, claimedUnder, renewedTo); err != nil || j.Len() != 1 {
		t.Fatalf("Write = %v with %d kept, want the outcome kept", err, j.Len())
	}
	if n, err := j.Replay(ctx); err != nil || n != 1 {
		t.Fatalf("Replay = %d, %v; want the kept outcome written under the renewed lease", n, err)
	}
	sentOnce(t, store.Store, "m1")
}

// An outcome kept by a journal of the earlier format (the bare transition,
// naming its lease) is written at the restart, not read as empty and
// dropped.
func TestReplaysEarlierEntries(t *testing.T) {
	store := outboxtest.Store(t)
	path := filepath.Join(t.TempDir(), "outcomes.db")
	j := open(t, path, store)
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	tr := claimed(t, store, "m1")
	raw, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error { return tx.Bucket([]byte("outcomes")).Put([]byte("m1"), raw) }); err != nil {
		t.Fatal(err)
	}
	db.Close()
	j = open(t, path, store)
	defer j.Close()
	if n, err := j.Replay(context.Background()); n != 1 || err != nil {
		t.Fatalf("Replay of an earlier entry = %d, %v; want 1 written", n, err)
	}
	sentOnce(t, store, "m1")
}
