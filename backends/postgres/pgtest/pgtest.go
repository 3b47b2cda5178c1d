// Package pgtest gives tests a PostgreSQL database of their own.
package pgtest

import (
	"context"
	"testing"

	"github.com/genropy/postino/backends/postgres"
	"github.com/genropy/postino/internal/testrig/sqltest"
)

// Database creates an empty database, dropped at the end of the test, and
// returns its DSN (sqltest.Database). Without a server the test is
// skipped, or fails under CI=true.
func Database(t testing.TB) string {
	t.Helper()
	return sqltest.Database(t, "postgres")
}

// Migrated is Database with the outbox schema.
func Migrated(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	dsn := Database(t)
	pool, err := postgres.Connect(ctx, dsn, postgres.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	return dsn
}
