package mysql_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/mysql"
)

// storeAndDB opens a store on a fresh database, and a connection of its
// own to look at the tables beside it; both close with the test.
func storeAndDB(t *testing.T) (*mysql.Store, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	dsn := freshDatabase(t)
	s := openDSN(t, dsn)
	db, err := mysql.Connect(ctx, dsn, mysql.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return s, db
}

// sqlStore is a store on a fresh database, as the SQL stores' checks of
// backendtest take it.
func sqlStore(t *testing.T) backendtest.SQL {
	s, db := storeAndDB(t)
	return backendtest.SQL{Store: s, Tables: tables(db),
		SetBodyBudget:  func(n int) { mysql.SetBodyBudget(s, n) },
		FailNextCommit: func(err error) { mysql.FailNextCommit(s, err) }}
}

// tables looks at a store's tables through db.
func tables(db *sql.DB) backendtest.Tables {
	return backendtest.Tables{Scan: func(q string, dest any) error { return db.QueryRow(q).Scan(dest) },
		Exec: func(q string) error { _, err := db.Exec(q); return err }}
}

func TestBodies(t *testing.T) { backendtest.Bodies(t, sqlStore(t)) }

// migratedFrom makes an outbox of schema v holding one row, old-1, whose
// bytes are at path; Open refuses it until Migrate brings it up to date.
// It returns the store opened then, closed with the test.
func migratedFrom(t *testing.T, v int, path string) *mysql.Store {
	t.Helper()
	ctx := context.Background()
	dsn, db := seedDatabase(t)
	if _, err := mysql.MigrateTo(ctx, db, v); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO emails (id, status, eml_file_path, created_at, updated_at, due_at, queue_at)
		VALUES ('old-1', 'READY', ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))`, path); err != nil {
		t.Fatal(err)
	}
	if _, err := mysql.Open(ctx, dsn, mysql.Options{}); !errors.Is(err, mysql.ErrSchemaBehind) {
		t.Fatalf("Open of schema %d: %v", v, err)
	}
	if applied, err := mysql.Migrate(ctx, db); err != nil || len(applied) != mysql.LatestVersion()-v || applied[0] != v+1 {
		t.Fatalf("Migrate from %d = %v, %v", v, applied, err)
	}
	s := openDSN(t, dsn)
	return s
}

// TestMigrateBodies migrates a schema-6 outbox with rows in it: their
// spool paths stay, and new rows keep their bytes in the store.
func TestMigrateBodies(t *testing.T) {
	ctx := context.Background()
	s := migratedFrom(t, 6, "20260101/0000/old-1.0123456789ab.eml")
	if m, err := s.Get(ctx, "old-1"); err != nil || m.EmlPath != "20260101/0000/old-1.0123456789ab.eml" {
		t.Fatalf("old row after the migration: %+v, %v", m, err)
	}
	body := []byte("Subject: new\r\n\r\nkept in the outbox\r\n")
	if err := s.Create(ctx, backendtest.BodyMessage("new-1", "0123456789ab", body)); err != nil {
		t.Fatal(err)
	}
	if got := backendtest.ReadBody(t, s, "new-1"); !bytes.Equal(got, body) {
		t.Errorf("read back %q", got)
	}
}

// TestBodiesAtomic fails the statement of a message's bytes after its row
// was inserted, in one transaction: neither the row nor any byte is left,
// so no message can be delivered without the 250 its commit gives.
func TestBodiesAtomic(t *testing.T) {
	ctx := context.Background()
	s, db := storeAndDB(t)
	var packet int
	if err := db.QueryRow("SELECT @@max_allowed_packet").Scan(&packet); err != nil {
		t.Fatal(err)
	}
	// A budget past the server's packet: the bytes' statement is refused.
	mysql.SetBodyBudget(s, 2*packet)
	if err := s.Create(ctx, backendtest.BodyMessage("too-big", "0123456789ab", bytes.Repeat([]byte("x"), packet+1))); err == nil {
		t.Fatal("a statement over max_allowed_packet was accepted")
	}
	var rows, chunks int
	if err := db.QueryRow("SELECT (SELECT COUNT(*) FROM emails), (SELECT COUNT(*) FROM email_bodies)").Scan(&rows, &chunks); err != nil {
		t.Fatal(err)
	}
	if rows != 0 || chunks != 0 {
		t.Errorf("a failed create left %d rows and %d chunks", rows, chunks)
	}
}
