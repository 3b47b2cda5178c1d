package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/postgres"
	"github.com/genropy/postino/backends/postgres/pgtest"
)

// freshDatabase is a database of the test's own, migrated.
func freshDatabase(t testing.TB) string { return pgtest.Migrated(t) }

func openStore(t testing.TB) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), freshDatabase(t), postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func open(t *testing.T) backends.Outbox { return openStore(t) }

func TestConformance(t *testing.T) {
	backendtest.Run(t, open)
}

func BenchmarkStore(b *testing.B) {
	backendtest.Benchmark(b, func(b *testing.B) backends.Outbox { return openStore(b) })
}

// TestSuspendWhileCreating suspends a batch while its messages are being
// created: every one of them, created before or after, is held, since a
// create reads the suspended batches under the batch's advisory lock.
func TestSuspendWhileCreating(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	const total = 200
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, total+1)
	for range 8 {
		wg.Go(func() {
			for n := next.Add(1); n <= total; n = next.Add(1) {
				if n == total/2 {
					errs <- s.SuspendBatch(ctx, "camp")
				}
				id := fmt.Sprintf("camp-%d", n)
				errs <- s.Create(ctx, &backends.Message{ID: id, Priority: 2, Batch: "camp", EmlPath: id + ".eml"})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	claim := func(from, to backends.Status) int {
		t.Helper()
		ms, err := s.Claim(ctx, backends.Claim{From: from, To: to, Now: now.Add(time.Minute), LeaseUntil: now.Add(time.Hour), Limit: 2 * total})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if to == backends.StatusIntaking {
				if err := s.Transition(ctx, backends.Transition{ID: m.ID, From: to, To: backends.StatusReady, At: now}); err != nil {
					t.Fatal(err)
				}
			}
		}
		return len(ms)
	}
	// A suspended batch is taken in and prepared, not sent.
	if n := claim(backends.StatusAccepted, backends.StatusIntaking); n != total {
		t.Fatalf("intake claimed %d of %d", n, total)
	}
	if n := claim(backends.StatusReady, backends.StatusProcessing); n != 0 {
		t.Errorf("%d messages of the suspended batch claimed for delivery", n)
	}
	if err := s.ActivateBatch(ctx, "camp"); err != nil {
		t.Fatal(err)
	}
	if n := claim(backends.StatusReady, backends.StatusProcessing); n != total {
		t.Errorf("claimed %d of %d after activation", n, total)
	}
}

// TestConcurrentClaimsShareAGroup: claims of one message each, made at
// once, meet in one group commit; each must still get a message of its own
// while any is due.
func TestConcurrentClaimsShareAGroup(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	const claimers, rounds = 8, 25
	for i := range claimers * rounds {
		id := fmt.Sprintf("one-%d", i)
		if err := s.Create(ctx, &backends.Message{ID: id, Priority: 2, EmlPath: id + ".eml"}); err != nil {
			t.Fatal(err)
		}
	}
	var taken sync.Map
	var wg sync.WaitGroup
	for range claimers {
		wg.Go(func() {
			for range rounds {
				now := time.Now().UTC()
				ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusAccepted, To: backends.StatusIntaking, Now: now,
					LeaseUntil: now.Add(time.Minute), Limit: 1})
				if err != nil || len(ms) != 1 {
					t.Errorf("a claim of one got %d messages, %v, with more due", len(ms), err)
					return
				}
				if _, dup := taken.LoadOrStore(ms[0].ID, true); dup {
					t.Errorf("%s claimed twice", ms[0].ID)
				}
			}
		})
	}
	wg.Wait()
}
