package postgres_test

import (
	"context"
	"testing"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/postgres"
	"github.com/genropy/postino/backends/postgres/pgtest"
)

// freshDatabase is a database of the test's own, migrated.
func freshDatabase(t testing.TB) string { return pgtest.Migrated(t) }

func openStore(t testing.TB) *postgres.Store { return openDSN(t, freshDatabase(t)) }

// openDSN opens a store on the database of dsn, closed with the test.
func openDSN(t testing.TB, dsn string) *postgres.Store {
	s, err := postgres.Open(context.Background(), dsn, postgres.Options{})
	return backendtest.Opened(t, s, err)
}

func open(t *testing.T) backends.Outbox { return openStore(t) }

func TestConformance(t *testing.T) {
	backendtest.Run(t, open)
}

func BenchmarkStore(b *testing.B) {
	backendtest.Benchmark(b, func(b *testing.B) backends.Outbox { return openStore(b) })
}

// TestSuspendWhileCreating: a create reads the suspended batches under
// the batch's advisory lock, so a batch suspended meanwhile holds them all.
func TestSuspendWhileCreating(t *testing.T) { backendtest.SuspendWhileCreating(t, openStore(t)) }

func TestConcurrentClaimsShareAGroup(t *testing.T) {
	backendtest.ConcurrentClaimsShareAGroup(t, openStore(t))
}

func TestCommitOutcomeUnknown(t *testing.T) { backendtest.CommitOutcomeUnknown(t, sqlStore(t)) }

// TestConcurrentTrips: the insert of the batch's row decides which trip
// suspended it.
func TestConcurrentTrips(t *testing.T) { backendtest.ConcurrentTrips(t, openStore(t)) }
