package mysql_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/mysql"
)

// baseDSN is the server the tests use; each test gets a database of its own.
func baseDSN() string {
	if dsn := os.Getenv("TEST_POSTINO_MYSQL_DSN"); dsn != "" {
		return dsn
	}
	return "root@tcp(127.0.0.1:3306)/"
}

var dbCounter atomic.Int64

// freshDatabase creates an empty database, migrated, dropped at the end of
// the test. Without a server the test is skipped, or fails under CI=true.
func freshDatabase(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	admin, err := mysql.Connect(ctx, baseDSN(), mysql.Options{MaxConns: 2})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("MySQL/MariaDB is needed (TEST_POSTINO_MYSQL_DSN, default %s): %v", baseDSN(), err)
		}
		t.Skipf("no MySQL/MariaDB at %s: %v", baseDSN(), err)
	}
	defer admin.Close()
	name := fmt.Sprintf("postino_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, dbCounter.Add(1))
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if db, err := sql.Open("mysql", baseDSN()); err == nil {
			db.Exec("DROP DATABASE " + name)
			db.Close()
		}
	})
	dsn := baseDSN() + name
	db, err := mysql.Connect(ctx, dsn, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	return dsn
}

func open(t *testing.T) backends.Outbox {
	t.Helper()
	s, err := mysql.Open(context.Background(), freshDatabase(t), mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, open)
}

func BenchmarkStore(b *testing.B) {
	backendtest.Benchmark(b, func(b *testing.B) backends.Outbox {
		s, err := mysql.Open(context.Background(), freshDatabase(b), mysql.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	})
}

// TestSessionsReadCommitted: every session of the pool starts in READ
// COMMITTED, which the store's transactions rely on without asking.
func TestSessionsReadCommitted(t *testing.T) {
	ctx := context.Background()
	db, err := mysql.Connect(ctx, freshDatabase(t), mysql.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var level string
	// MySQL 8 names the variable transaction_isolation, MariaDB 10 tx_isolation.
	if err := db.QueryRowContext(ctx, "SELECT @@SESSION.transaction_isolation").Scan(&level); err != nil {
		if err := db.QueryRowContext(ctx, "SELECT @@SESSION.tx_isolation").Scan(&level); err != nil {
			t.Fatal(err)
		}
	}
	if level != "READ-COMMITTED" {
		t.Errorf("session isolation %s, want READ-COMMITTED", level)
	}
}

// TestSuspendWhileCreating suspends a batch while its messages are being
// created: every one of them, created before or after, is held, since a
// create reads the suspended batches after inserting its rows.
func TestSuspendWhileCreating(t *testing.T) {
	ctx := context.Background()
	s, err := mysql.Open(ctx, freshDatabase(t), mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
// once, meet in one group commit with the same first candidate; each must
// still get a message of its own while any is due.
func TestConcurrentClaimsShareAGroup(t *testing.T) {
	ctx := context.Background()
	s, err := mysql.Open(ctx, freshDatabase(t), mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
