package mysql_test

import (
	"context"
	"testing"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/mysql"
	"github.com/genropy/postino/internal/testrig/sqltest"
)

// freshDatabase creates a database, migrated, dropped at the end of the
// test (sqltest.Database). Without a server the test is skipped, or fails
// under CI=true.
func freshDatabase(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	dsn := sqltest.Database(t, "mysql")
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

func open(t *testing.T) backends.Outbox { return openStore(t) }

// openStore opens a store on a fresh database, closed with the test.
func openStore(t testing.TB) *mysql.Store { return openDSN(t, freshDatabase(t)) }

// openDSN opens a store on the database of dsn, closed with the test.
func openDSN(t testing.TB, dsn string) *mysql.Store {
	s, err := mysql.Open(context.Background(), dsn, mysql.Options{})
	return backendtest.Opened(t, s, err)
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, open)
}

func BenchmarkStore(b *testing.B) {
	backendtest.Benchmark(b, func(b *testing.B) backends.Outbox { return openStore(b) })
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

// TestSuspendWhileCreating: a create reads the suspended batches after
// inserting its rows, so a batch suspended meanwhile holds them all.
func TestSuspendWhileCreating(t *testing.T) { backendtest.SuspendWhileCreating(t, open(t)) }

// TestConcurrentClaimsShareAGroup: the claims of a group have the same
// first candidate.
func TestConcurrentClaimsShareAGroup(t *testing.T) {
	backendtest.ConcurrentClaimsShareAGroup(t, open(t))
}

func TestCommitOutcomeUnknown(t *testing.T) { backendtest.CommitOutcomeUnknown(t, sqlStore(t)) }

// TestConcurrentTrips: the insert of the batch's row decides which trip
// suspended it.
func TestConcurrentTrips(t *testing.T) { backendtest.ConcurrentTrips(t, open(t)) }
