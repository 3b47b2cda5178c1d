package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/postgres"
)

// storeAndDB opens a store on a fresh database, and a pool of its own to
// look at the tables beside it; both close with the test.
func storeAndDB(t *testing.T) (*postgres.Store, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	dsn := freshDatabase(t)
	s, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	db, err := postgres.Connect(ctx, dsn, postgres.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return s, db
}

// count reads one number.
func count(t *testing.T, db *pgxpool.Pool, query string) int {
	t.Helper()
	var n *int64
	if err := db.QueryRow(context.Background(), query).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	if n == nil {
		return 0
	}
	return int(*n)
}

// TestBodies keeps message bytes in the store: created with the row, read
// back whole whatever their size, cut in chunks and statements within the
// budget, kept once for a duplicate, deleted with the row.
func TestBodies(t *testing.T) {
	ctx := context.Background()
	s, db := storeAndDB(t)
	const budget = 64 << 10
	postgres.SetBodyBudget(s, budget)
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
	chunks, largest := count(t, db, "SELECT COUNT(*) FROM email_bodies"), count(t, db, "SELECT MAX(LENGTH(data)) FROM email_bodies")
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
	if _, err := db.Exec(ctx, "DELETE FROM emails WHERE id LIKE 'body-%'"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, db, "SELECT COUNT(*) FROM email_bodies"); n != 0 {
		t.Errorf("%d chunks left after their rows were deleted", n)
	}
}

// TestBodiesAtomic fails the statement of a message's bytes after its row
// was inserted, in one transaction: neither the row nor any byte is left,
// so no message can be delivered without the 250 its commit gives.
func TestBodiesAtomic(t *testing.T) {
	ctx := context.Background()
	s, db := storeAndDB(t)
	// A constraint the bytes break: their statement is refused.
	if _, err := db.Exec(ctx, "ALTER TABLE email_bodies ADD CONSTRAINT small CHECK (length(data) < 1000)"); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, backendtest.BodyMessage("too-big", "0123456789ab", bytes.Repeat([]byte("x"), 1000))); err == nil {
		t.Fatal("bytes that break a constraint were accepted")
	}
	if rows, chunks := count(t, db, "SELECT COUNT(*) FROM emails"), count(t, db, "SELECT COUNT(*) FROM email_bodies"); rows != 0 || chunks != 0 {
		t.Errorf("a failed create left %d rows and %d chunks", rows, chunks)
	}
	if n := count(t, db, "SELECT COALESCE(SUM(n), 0) FROM email_counts"); n != 0 {
		t.Errorf("a failed create counted %d messages", n)
	}
}
