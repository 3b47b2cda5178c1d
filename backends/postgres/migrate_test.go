package postgres_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/postgres"
	"github.com/genropy/postino/backends/postgres/pgtest"
)

// TestMigrate: a store refuses an unmigrated database, saying what to run;
// Migrate brings it up to date, and a second run changes nothing.
func TestMigrate(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Database(t)
	_, err := postgres.Open(ctx, dsn, postgres.Options{})
	if !errors.Is(err, postgres.ErrSchemaBehind) || !strings.Contains(err.Error(), "postino migrate --backend postgres") {
		t.Fatalf("Open of an unmigrated database: %v", err)
	}
	pool, err := postgres.Connect(ctx, dsn, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if applied, err := postgres.Migrate(ctx, pool); err != nil || len(applied) != postgres.LatestVersion() {
		t.Fatalf("Migrate = %v, %v", applied, err)
	}
	if again, err := postgres.Migrate(ctx, pool); err != nil || len(again) != 0 {
		t.Fatalf("a second Migrate = %v, %v: it must change nothing", again, err)
	}
	if v, err := postgres.SchemaVersion(ctx, pool); err != nil || v != postgres.LatestVersion() {
		t.Fatalf("SchemaVersion = %d, %v", v, err)
	}
	s, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// TestConcurrentMigrate: relays starting together migrate once.
func TestConcurrentMigrate(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Database(t)
	var wg sync.WaitGroup
	applied := make(chan int, 16)
	for range 4 {
		wg.Go(func() {
			pool, err := postgres.Connect(ctx, dsn, postgres.Options{MaxConns: 1})
			if err != nil {
				t.Error(err)
				return
			}
			defer pool.Close()
			vs, err := postgres.Migrate(ctx, pool)
			if err != nil {
				t.Error(err)
			}
			for _, v := range vs {
				applied <- v
			}
		})
	}
	wg.Wait()
	close(applied)
	seen := map[int]int{}
	for v := range applied {
		seen[v]++
	}
	for v := 1; v <= postgres.LatestVersion(); v++ {
		if seen[v] != 1 {
			t.Errorf("migration %d applied %d times", v, seen[v])
		}
	}
}

// seedDatabase makes a database with only the seed's tables, as a tool
// that knows only the seed writes them, holding legacy-1 and its history
// and then the rows of more; it returns its DSN and a pool on it, closed
// with the test.
func seedDatabase(t *testing.T, more ...string) (string, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	dsn := pgtest.Database(t)
	pool, err := postgres.Connect(ctx, dsn, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if _, err := postgres.MigrateTo(ctx, pool, 1); err != nil {
		t.Fatal(err)
	}
	for _, st := range slices.Concat(backendtest.SeedRows, more) {
		if _, err := pool.Exec(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	return dsn, pool
}

// TestMigrateSeedInPlace migrates the seed's tables with a row in them:
// the row keeps its values, its history, and is counted.
func TestMigrateSeedInPlace(t *testing.T) {
	ctx := context.Background()
	dsn, pool := seedDatabase(t)
	if applied, err := postgres.Migrate(ctx, pool); err != nil || len(applied) != postgres.LatestVersion() {
		t.Fatalf("Migrate = %v, %v", applied, err)
	}
	s := openDSN(t, dsn)
	backendtest.CheckSeedMigrated(t, s)
	if c, err := s.Counts(ctx); err != nil || c[backends.StatusSentAcknowledged] != 1 {
		t.Errorf("counts after migration %v, %v", c, err)
	}
}
