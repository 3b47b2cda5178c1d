package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/postgres"
)

// baseDSN is the server the tests use; each test gets a database of its own.
func baseDSN() string {
	if dsn := os.Getenv("TEST_POSTINO_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://root@127.0.0.1:5432/test"
}

var dbCounter atomic.Int64

// emptyDatabase creates a database, dropped at the end of the test, and
// returns its DSN. Without a server the test is skipped, or fails under
// CI=true.
func emptyDatabase(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, baseDSN())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is needed (TEST_POSTINO_POSTGRES_DSN, default %s): %v", baseDSN(), err)
		}
		t.Skipf("no PostgreSQL at %s: %v", baseDSN(), err)
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("postino_test_%d_%d", os.Getpid(), dbCounter.Add(1))
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := pgx.Connect(ctx, baseDSN()); err == nil {
			c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	u, err := url.Parse(baseDSN())
	if err != nil {
		t.Fatalf("TEST_POSTINO_POSTGRES_DSN %s: give a postgres:// URL: %v", baseDSN(), err)
	}
	u.Path = "/" + name
	return u.String()
}

// freshDatabase is emptyDatabase, migrated.
func freshDatabase(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	dsn := emptyDatabase(t)
	pool, err := postgres.Connect(ctx, dsn, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return dsn
}

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
