package mysql_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/mysql"
)

// storeAndDB opens a store on a fresh database, and a connection of its
// own to look at the tables beside it; both close with the test.
func storeAndDB(t *testing.T) (*mysql.Store, *sql.DB) {
	t.Helper()
	ctx := context.Background()
	dsn := freshDatabase(t)
	s, err := mysql.Open(ctx, dsn, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	db, err := mysql.Connect(ctx, dsn, mysql.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return s, db
}

// TestBodies keeps message bytes in the store: created with the row, read
// back whole whatever their size, cut in chunks and statements within the
// packet budget, kept once for a duplicate, deleted with the row.
func TestBodies(t *testing.T) {
	ctx := context.Background()
	s, db := storeAndDB(t)
	const budget = 64 << 10
	mysql.SetBodyBudget(s, budget)
	sizes := []int{0, 1, 4 << 10, budget - 1, budget, budget + 1, 5*budget + 17}
	want := map[string][]byte{}
	var wg sync.WaitGroup
	errs := make(chan error, len(sizes))
	for i, n := range sizes {
		id := fmt.Sprintf("body-%d", i)
		body := backendtest.RandomBytes(n)
		want[id] = body
		wg.Go(func() { // concurrent: a group commit holds several bodies
			if err := s.Create(ctx, backendtest.BodyMessage(id, "0123456789ab", body)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for id, b := range want {
		if got := backendtest.ReadBody(t, s, id); !bytes.Equal(got, b) {
			t.Errorf("%s: read %d bytes back, want %d, equal %v", id, len(got), len(b), bytes.Equal(got, b))
		}
	}
	var chunks, largest int
	if err := db.QueryRow("SELECT COUNT(*), MAX(LENGTH(data)) FROM email_bodies").Scan(&chunks, &largest); err != nil {
		t.Fatal(err)
	}
	if largest > budget || chunks < len(sizes)+5 {
		t.Errorf("%d chunks, the largest %d bytes: want each within %d", chunks, largest, budget)
	}

	// A second submission of an id keeps the first one's bytes.
	dup := backendtest.BodyMessage("body-2", "0123456789ab", []byte("another message"))
	dup.EmlPath = backends.BodyRef("body-2", "ba9876543210")
	if err := s.Create(ctx, dup); !errors.Is(err, backends.ErrDuplicate) {
		t.Fatalf("duplicate create: %v", err)
	}
	if got := backendtest.ReadBody(t, s, "body-2"); !bytes.Equal(got, want["body-2"]) {
		t.Error("a duplicate changed the first submission's bytes")
	}
	if _, err := s.OpenBody(ctx, "nobody"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("OpenBody of no message: %v", err)
	}
	// A message of the spool keeps no bytes in the store.
	spooled := backendtest.BodyMessage("spooled", "0123456789ab", nil)
	spooled.EmlPath = "20260101/0000/spooled.0123456789ab.eml"
	if err := s.Create(ctx, spooled); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenBody(ctx, "spooled"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("OpenBody of a spooled message: %v", err)
	}

	// The bytes go with the row.
	if _, err := db.Exec("DELETE FROM emails WHERE id LIKE 'body-%'"); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("SELECT COUNT(*) FROM email_bodies").Scan(&chunks); err != nil || chunks != 0 {
		t.Errorf("%d chunks left after their rows were deleted (%v)", chunks, err)
	}
}

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
	s, err := mysql.Open(ctx, dsn, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
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
