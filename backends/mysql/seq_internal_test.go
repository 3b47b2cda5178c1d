package mysql

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
	"github.com/genropy/postino/internal/testrig/sqltest"
)

// A group that waits for a message's lock while another transaction adds
// an event to it numbers its own event after that one, in one commit: the
// locking read sees the number the other committed meanwhile.
func TestEventNumberAfterLockWait(t *testing.T) {
	ctx := context.Background()
	db, s := openMigrated(t)
	for _, id := range []string{"m1", "m2"} {
		if err := s.Create(ctx, &backends.Message{ID: id, Priority: 2, EmlPath: id + ".eml"}); err != nil {
			t.Fatal(err)
		}
	}
	// Another writer holds m2 and adds its first event, as the store does.
	other, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	now := time.Now().UTC()
	if _, err := other.ExecContext(ctx, "SELECT id FROM emails WHERE id = 'm2' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ExecContext(ctx, `INSERT INTO email_events (event_id, email_id, seq, outcome, at, state, due_at, updated_at)
		VALUES ('e-other', 'm2', 1, 'DELAYED', ?, 'acked', ?, ?)`, now, now, now); err != nil {
		t.Fatal(err)
	}
	// As the store writes it with the event (txRows.write).
	if _, err := other.ExecContext(ctx, "UPDATE emails SET event_seq = 1 WHERE id = 'm2'"); err != nil {
		t.Fatal(err)
	}
	// One group moves m1, then m2, which it waits for.
	var group []*op
	for _, id := range []string{"m1", "m2"} {
		tr := backends.Transition{ID: id, From: backends.StatusAccepted, To: backends.StatusFailed, Reason: "cancelled",
			Event: backends.OutcomeEvent(backends.StatusAccepted, backends.StatusFailed, "cancelled", nil)}
		if err := tr.Prepare(now); err != nil {
			t.Fatal(err)
		}
		group = append(group, &op{Write: sqlstore.Write{Transition: &tr}})
	}
	done := make(chan []error, 1)
	go func() { done <- s.commit(group) }()
	deadline := time.Now().Add(60 * time.Second)
	// The server's status names the transaction waiting for a lock
	// (information_schema.innodb_trx may not list it yet).
	for waiting := false; !waiting; {
		select {
		case errs := <-done:
			t.Fatalf("the group ended without waiting for m2: %v", errs)
		default:
		}
		var kind, name, status string
		if err := db.QueryRowContext(ctx, "SHOW ENGINE INNODB STATUS").Scan(&kind, &name, &status); err != nil {
			t.Fatal(err)
		}
		waiting = strings.Contains(status, "WAITING") && strings.Contains(status, "FOR THIS LOCK TO BE GRANTED")
		if time.Now().After(deadline) {
			t.Fatal("the group never waited for m2")
		}
	}
	if err := other.Commit(); err != nil {
		t.Fatal(err)
	}
	// A group that fails is run again write by write (CommitGroup), which
	// hides the failure from the writes but not from commit's result.
	if errs := <-done; errs != nil {
		t.Fatalf("the group did not commit as one, but write by write: %v", errs)
	}
	events, err := s.Events(ctx, "m2")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[0].ID != "e-other" || events[1].Seq != 2 {
		for _, e := range events {
			t.Logf("event %s seq %d", e.ID, e.Seq)
		}
		t.Errorf("m2's events: want e-other then the group's, numbered 2")
	}
}

// An event a relay of an earlier version added, keeping no event_seq, is
// counted all the same: the next is numbered after it.
func TestEventNumberAfterEarlierRelay(t *testing.T) {
	ctx := context.Background()
	db, s := openMigrated(t)
	if err := s.Create(ctx, &backends.Message{ID: "m", Priority: 2, EmlPath: "m.eml"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	if _, err := db.ExecContext(ctx, `INSERT INTO email_events (event_id, email_id, seq, outcome, at, state, due_at, updated_at)
		VALUES ('e-earlier', 'm', 1, 'DELAYED', ?, 'acked', ?, ?)`, now, now, now); err != nil {
		t.Fatal(err)
	}
	if err := s.AddEvent(ctx, &backends.Event{ID: "e-now", MessageID: "m", Outcome: "DELAYED"}); err != nil {
		t.Fatal(err)
	}
	events, err := s.Events(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 2 || events[1].ID != "e-now" || events[1].Seq != 2 {
		t.Errorf("events: %d; want e-now numbered 2 after e-earlier", len(events))
	}
}

// openMigrated makes a migrated database of the test's own, and returns a
// connection to it beside a store on it, both closed with the test.
func openMigrated(t *testing.T) (*sql.DB, *Store) {
	t.Helper()
	ctx := context.Background()
	dsn := sqltest.Database(t, "mysql")
	db, err := Connect(ctx, dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	s, err := Open(ctx, dsn, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return db, s
}
