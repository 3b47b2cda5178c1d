// Package pgtest gives tests a PostgreSQL database of their own.
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends/postgres"
)

// BaseDSN is the server the tests use: TEST_POSTINO_POSTGRES_DSN, by
// default postgres://root@127.0.0.1:5432/test.
func BaseDSN() string {
	if dsn := os.Getenv("TEST_POSTINO_POSTGRES_DSN"); dsn != "" {
		return dsn
	}
	return "postgres://root@127.0.0.1:5432/test"
}

var counter atomic.Int64

// Database creates an empty database, postino_test_<pid>_<n>, dropped at
// the end of the test, and returns its DSN. Without a server the test is
// skipped, or fails under CI=true.
func Database(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, BaseDSN())
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL is needed (TEST_POSTINO_POSTGRES_DSN, default postgres://root@127.0.0.1:5432/test): %v", err)
		}
		t.Skipf("no PostgreSQL at %s: %v", BaseDSN(), err)
	}
	defer admin.Close(ctx)
	// The time too: a database a killed run left behind has another name.
	name := fmt.Sprintf("postino_test_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6, counter.Add(1))
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := pgx.Connect(ctx, BaseDSN()); err == nil {
			c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(ctx)
		}
	})
	u, err := url.Parse(BaseDSN())
	if err != nil || u.Scheme == "" {
		t.Fatalf("TEST_POSTINO_POSTGRES_DSN %s: give a postgres:// URL (%v)", BaseDSN(), err)
	}
	u.Path = "/" + name
	return u.String()
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
