package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/mysql"
)

// seedDatabase makes a database with only the seed's tables, as an
// existing outbox would have them, and a row in them.
func seedDatabase(t *testing.T) (string, *sql.DB) {
	t.Helper()
	dsn := freshDatabase(t)
	db, err := mysql.Connect(context.Background(), dsn, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, st := range []string{"DROP TABLE email_receipts", "DROP TABLE email_bodies", "DROP TABLE email_alarms", "DROP TABLE message_links", "DROP TABLE mailbox_cursors", "DROP TABLE email_events", "DROP TABLE email_batches", "DROP TABLE email_statuses", "DROP TABLE emails", "DROP TABLE schema_migrations"} {
		if _, err := db.Exec(st); err != nil {
			t.Fatal(err)
		}
	}
	// The seed's tables, as migration 1 keeps them, then its rows.
	if _, err := mysql.MigrateTo(context.Background(), db, 1); err != nil {
		t.Fatal(err)
	}
	for _, st := range backendtest.SeedRows {
		if _, err := db.Exec(st); err != nil {
			t.Fatal(err)
		}
	}
	return dsn, db
}

func TestMigrateSeedInPlace(t *testing.T) {
	ctx := context.Background()
	dsn, db := seedDatabase(t)
	_, err := mysql.Open(ctx, dsn, mysql.Options{})
	if !errors.Is(err, mysql.ErrSchemaBehind) || !strings.Contains(err.Error(), "postino migrate --backend mysql") {
		t.Fatalf("Open on a schema behind: %v", err)
	}
	applied, err := mysql.Migrate(ctx, db)
	if err != nil || len(applied) != mysql.LatestVersion() {
		t.Fatalf("Migrate = %v, %v", applied, err)
	}
	again, err := mysql.Migrate(ctx, db)
	if err != nil || len(again) != 0 {
		t.Fatalf("a second Migrate = %v, %v: it must change nothing", again, err)
	}
	s := openDSN(t, dsn)
	backendtest.CheckSeedMigrated(t, s)
	// The new statuses fit in the extended column.
	for id, path := range map[string][]backends.Status{
		"new-1": {backends.StatusInvalid, backends.StatusCallingInvalid, backends.StatusInvalidAcknowledged},
		"new-2": {backends.StatusSuppressed, backends.StatusCallingSuppressed, backends.StatusSuppressedAcknowledged},
	} {
		if err := s.Create(ctx, &backends.Message{ID: id, Priority: 2, EmlPath: "x.eml"}); err != nil {
			t.Fatal(err)
		}
		from := backends.StatusAccepted
		for _, to := range path {
			tr := backends.Transition{ID: id, From: from, To: to}
			if to.Working() {
				tr.LeaseUntil = time.Now().Add(time.Minute)
			}
			if err := s.Transition(ctx, tr); err != nil {
				t.Fatalf("%s to %s: %v", from, to, err)
			}
			from = to
		}
	}
}

func TestMigrateInterrupted(t *testing.T) {
	ctx := context.Background()
	_, db := seedDatabase(t)
	// Half of the second migration ran before a crash.
	for _, st := range []string{
		"CREATE TABLE schema_migrations (version INT PRIMARY KEY, name VARCHAR(200) NOT NULL, applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))",
		"INSERT INTO schema_migrations (version, name) VALUES (1, '0001_seed.sql')",
		"ALTER TABLE emails ADD COLUMN message_id VARCHAR(998) NULL",
		"ALTER TABLE emails ADD COLUMN priority TINYINT NOT NULL DEFAULT 2",
		"CREATE INDEX idx_created ON emails (created_at)",
	} {
		if _, err := db.Exec(st); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := mysql.Migrate(ctx, db); err != nil {
		t.Fatalf("Migrate after an interrupted run: %v", err)
	}
	if v, _ := mysql.SchemaVersion(ctx, db); v != mysql.LatestVersion() {
		t.Errorf("schema version %d", v)
	}
}

func TestConcurrentMigrate(t *testing.T) {
	ctx := context.Background()
	dsn, _ := seedDatabase(t)
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() {
			db, err := mysql.Connect(ctx, dsn, mysql.Options{})
			if err != nil {
				errs[i] = err
				return
			}
			defer db.Close()
			_, errs[i] = mysql.Migrate(ctx, db)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("concurrent Migrate: %v", err)
		}
	}
}

// TestLockWaitRetried holds a message's row lock past the lock wait
// timeout: the transition fails once with error 1205 and succeeds on retry.
func TestLockWaitRetried(t *testing.T) {
	ctx := context.Background()
	dsn := freshDatabase(t)
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	s, err := mysql.Open(ctx, dsn+sep+"innodb_lock_wait_timeout=1", mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Create(ctx, &backends.Message{ID: "locked", Priority: 2, EmlPath: "x.eml"}); err != nil {
		t.Fatal(err)
	}
	blocker, err := mysql.Connect(ctx, dsn, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Close()
	tx, err := blocker.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("SELECT id FROM emails WHERE id = 'locked' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(1500 * time.Millisecond); tx.Rollback() }()
	start := time.Now()
	err = s.Transition(ctx, backends.Transition{ID: "locked", From: backends.StatusAccepted, To: backends.StatusInvalid, Reason: "test"})
	if err != nil {
		t.Fatalf("transition behind a held lock: %v", err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("the transition did not wait for the lock (%s)", d)
	}
}

// TestMigrateFromVersion5 migrates an outbox that a relay of schema 5 left,
// with rows in it and the migration interrupted once, and checks what 0006
// adds: counts from the counters, claims that skip a suspended batch by
// index, listings through rows that had no queue time.
func TestMigrateFromVersion5(t *testing.T) {
	ctx := context.Background()
	dsn, db := seedDatabase(t)
	if _, err := mysql.MigrateTo(ctx, db, 5); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	past, future := now.Add(-time.Hour), now.Add(time.Hour)
	rows := []struct {
		id, status, batch string
		priority          int
		queue, lease      any
	}{
		{"r-held", "READY", "camp", 0, past, nil},
		{"r-free", "READY", "", 2, past, nil},
		{"r-future", "READY", "", 0, future, nil},
		{"a-1", "ACCEPTED", "", 2, past, nil},
		{"p-1", "PROCESSING", "", 2, past, past},
	}
	for _, r := range rows {
		if _, err := db.Exec(`INSERT INTO emails (id, status, eml_file_path, priority, batch_code, created_at, updated_at, due_at, queue_at, lease_until)
			VALUES (?, ?, 'x.eml', ?, NULLIF(?, ''), ?, ?, ?, ?, ?)`, r.id, r.status, r.priority, r.batch, past, past, r.queue, r.queue, r.lease); err != nil {
			t.Fatal(err)
		}
	}
	// The batch was suspended at schema 5; then 0006 ran halfway.
	for _, st := range []string{
		"INSERT INTO email_batches (code, suspended_at) VALUES ('camp', UTC_TIMESTAMP(6))",
		"ALTER TABLE emails ADD COLUMN held TINYINT NOT NULL DEFAULT 0",
		"DROP INDEX idx_queue ON emails",
	} {
		if _, err := db.Exec(st); err != nil {
			t.Fatal(err)
		}
	}
	if applied, err := mysql.Migrate(ctx, db); err != nil || len(applied) != mysql.LatestVersion()-5 {
		t.Fatalf("Migrate from 5 = %v, %v", applied, err)
	}
	s, err := mysql.Open(ctx, dsn, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantCounts := func(want map[backends.Status]int) {
		t.Helper()
		got, err := s.Counts(ctx)
		if err != nil || !maps.Equal(got, want) {
			t.Errorf("Counts = %v, %v; want %v", got, err, want)
		}
	}
	wantCounts(map[backends.Status]int{backends.StatusReady: 3, backends.StatusAccepted: 1, backends.StatusProcessing: 1,
		backends.StatusSentAcknowledged: 1})
	claim := func() []string {
		t.Helper()
		ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now,
			LeaseUntil: future, Limit: 10, Reason: "test"})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, m := range ms {
			ids = append(ids, m.ID)
		}
		return ids
	}
	if got := claim(); !slices.Equal(got, []string{"r-free"}) {
		t.Errorf("claim with batch camp suspended before the migration: %v, want [r-free]", got)
	}
	var all []string
	for q := (backends.ListQuery{Limit: 2}); ; {
		page, next, err := s.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page {
			all = append(all, m.ID)
		}
		if next == "" {
			break
		}
		q.After = next
	}
	if len(all) != 6 {
		t.Errorf("listing every message in pages of 2: %v", all)
	}
	if n, err := s.Restore(ctx, now); err != nil || n != 1 {
		t.Errorf("Restore = %d, %v; want p-1", n, err)
	}
	if err := s.ActivateBatch(ctx, "camp"); err != nil {
		t.Fatal(err)
	}
	if got := claim(); !slices.Equal(got, []string{"r-held", "p-1"}) {
		t.Errorf("claim after activation: %v, want [r-held p-1]", got)
	}
	if gone, err := s.Purge(ctx, future, 10); err != nil || len(gone) != 1 || gone[0].ID != "legacy-1" {
		t.Errorf("Purge = %v, %v; want legacy-1", gone, err)
	}
	wantCounts(map[backends.Status]int{backends.StatusReady: 1, backends.StatusAccepted: 1, backends.StatusProcessing: 3})
}

// TestMigrateEventNumbers: 0009 keeps each message's last event number on
// its row, from the events an outbox of schema 8 holds, and the next event
// follows them.
func TestMigrateEventNumbers(t *testing.T) {
	ctx := context.Background()
	dsn, db := seedDatabase(t)
	if _, err := mysql.MigrateTo(ctx, db, 8); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	if _, err := db.Exec(`INSERT INTO emails (id, status, eml_file_path, priority, created_at, updated_at, due_at, queue_at)
		VALUES ('m', 'SENT-ACKNOWLEDGED', 'x.eml', 2, ?, ?, ?, ?)`, now, now, now, now); err != nil {
		t.Fatal(err)
	}
	for seq := 1; seq <= 2; seq++ {
		if _, err := db.Exec(`INSERT INTO email_events (event_id, email_id, seq, outcome, at, state, due_at, updated_at)
			VALUES (?, 'm', ?, 'SENT', ?, 'acked', ?, ?)`, fmt.Sprintf("e-%d", seq), seq, now, now, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	s, err := mysql.Open(ctx, dsn, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.AddEvent(ctx, &backends.Event{ID: "e-3", MessageID: "m", Outcome: "DELAYED"}); err != nil {
		t.Fatal(err)
	}
	events, err := s.Events(ctx, "m")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 3 || events[2].ID != "e-3" || events[2].Seq != 3 {
		t.Errorf("events after the migration: %d, the last %+v; want e-3 numbered 3", len(events), events[len(events)-1])
	}
}
