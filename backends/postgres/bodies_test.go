package postgres_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/postgres"
)

// storeAndDB opens a store on a fresh database, and a pool of its own to
// look at the tables beside it; both close with the test.
func storeAndDB(t *testing.T) (*postgres.Store, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	dsn := freshDatabase(t)
	s := openDSN(t, dsn)
	db, err := postgres.Connect(ctx, dsn, postgres.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return s, db
}

// sqlStore is a store on a fresh database, as the SQL stores' checks of
// backendtest take it.
func sqlStore(t *testing.T) backendtest.SQL {
	s, db := storeAndDB(t)
	return backendtest.SQL{Store: s, Tables: tables(db),
		SetBodyBudget:  func(n int) { postgres.SetBodyBudget(s, n) },
		FailNextCommit: func(err error) { postgres.FailNextCommit(s, err) }}
}

// tables looks at a store's tables through db.
func tables(db *pgxpool.Pool) backendtest.Tables {
	ctx := context.Background()
	return backendtest.Tables{Scan: func(q string, dest any) error { return db.QueryRow(ctx, q).Scan(dest) },
		Exec: func(q string) error { _, err := db.Exec(ctx, q); return err }}
}

func TestBodies(t *testing.T) { backendtest.Bodies(t, sqlStore(t)) }

// TestBodiesAtomic fails the statement of a message's bytes after its row
// was inserted, in one transaction: neither the row nor any byte is left,
// so no message can be delivered without the 250 its commit gives.
func TestBodiesAtomic(t *testing.T) {
	ctx := context.Background()
	s, db := storeAndDB(t)
	look := tables(db)
	// A constraint the bytes break: their statement is refused.
	look.Run(t, "ALTER TABLE email_bodies ADD CONSTRAINT small CHECK (length(data) < 1000)")
	if err := s.Create(ctx, backendtest.BodyMessage("too-big", "0123456789ab", bytes.Repeat([]byte("x"), 1000))); err == nil {
		t.Fatal("bytes that break a constraint were accepted")
	}
	if rows, chunks := look.Count(t, "SELECT COUNT(*) FROM emails"), look.Count(t, "SELECT COUNT(*) FROM email_bodies"); rows != 0 || chunks != 0 {
		t.Errorf("a failed create left %d rows and %d chunks", rows, chunks)
	}
	if n := look.Count(t, "SELECT COALESCE(SUM(n), 0) FROM email_counts"); n != 0 {
		t.Errorf("a failed create counted %d messages", n)
	}
}
