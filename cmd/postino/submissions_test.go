package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/internal/testrig/sqltest"
	"github.com/genropy/postino/relay/admin"
)

// TestSubmissionsKill kills a relay with SIGKILL while it takes submissions
// from an app's table, and starts it again: every submission is delivered
// once. The kill lands while the relay holds a claimed batch, some of its
// messages in the outbox and their rows not deleted yet: the relay that
// starts again finds those rows, and their ids make taking them again a
// no-op.
func TestSubmissionsKill(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a relay process")
	}
	for _, driver := range []string{"postgres", "mysql"} {
		t.Run(driver, func(t *testing.T) { runSubmissionsKill(t, driver) })
	}
}

func runSubmissionsKill(t *testing.T, driver string) {
	bin := buildBinary(t)
	dsn := sqltest.Database(t, driver)
	if _, errOut, code := cli(t, "submissions", "migrate", "--driver", driver, "--dsn", dsn); code != 0 {
		t.Fatalf("submissions migrate: %s", errOut)
	}
	db, err := sql.Open(map[string]string{"postgres": "pgx", "mysql": "mysql"}[driver], dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const total = 3000
	insertSubmissions(t, db, driver, total)

	up := smtptest.Start(t, smtptest.Options{})
	data := t.TempDir()
	// Delivery waits until after the kill, so that a message sent twice
	// can only be a submission taken twice.
	config := func(paused bool) []string {
		path := filepath.Join(data, fmt.Sprintf("postino-%t.yaml", paused))
		yaml := fmt.Sprintf("delivery:\n  paused: %t\nsubmissions:\n  - driver: %s\n    dsn: %q\n", paused, driver, dsn)
		if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{"--config", path, "--smarthost", up.Addr}
	}
	p := startProcess(t, bin, data, config(true), nil)
	left := func() int {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM postino_submissions").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// The kill comes while a batch is taken: the outbox holds more
	// messages than the rows deleted so far. Rows go only when their
	// batch commits, so a kill right after some went (a third, say) may
	// find the next batch not started, as it did on a loaded machine. The
	// outbox is counted before the rows: every row deleted then was in the
	// outbox already, so more messages than rows deleted means a batch
	// was open when the rows were counted.
	live := &admin.Client{Base: p.admin}
	var inOutbox, deleted int
	waitFor(t, 2*time.Minute, func() string {
		return fmt.Sprintf("%d messages in the outbox, %d submissions deleted; want more than a third deleted, and a batch in the outbox not yet", inOutbox, deleted)
	}, func() bool {
		stats, err := live.Stats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		inOutbox = 0
		for _, n := range stats.Counts {
			inOutbox += n
		}
		deleted = total - left()
		return deleted >= total/3 && inOutbox > deleted
	})
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
	killedAt := time.Now()
	remaining := submissionIDs(t, db)
	if len(remaining) == 0 {
		t.Fatal("the relay took every submission before the kill: it proved nothing")
	}

	p = startProcess(t, bin, data, config(false), nil)
	waitFor(t, 3*time.Minute, func() string {
		return fmt.Sprintf("%d messages delivered, %d submissions left; want %d and none", len(up.Messages()), left(), total)
	}, func() bool { return len(up.Messages()) >= total && left() == 0 })
	seen := map[string]int{}
	for _, m := range up.Messages() {
		seen[m.Header("X-Genro-Mail-ID")]++
	}
	if len(seen) != total {
		t.Errorf("%d distinct submissions delivered; want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("%s delivered %d times; want once", id, n)
		}
	}
	// The rows left at the kill whose messages the outbox held already:
	// taken, not yet deleted.
	c := &admin.Client{Base: p.admin}
	inWindow := 0
	for _, id := range remaining {
		m, err := c.Get(context.Background(), id)
		if err != nil {
			t.Fatalf("message %s: %v", id, err)
		}
		if m.CreatedAt.Before(killedAt) {
			inWindow++
		}
	}
	t.Logf("%d submissions left at the kill, %d of them already in the outbox", len(remaining), inWindow)
	if inWindow == 0 {
		t.Error("no submission was between the outbox and its deletion at the kill: the kill proved nothing")
	}
}

// insertSubmissions commits n submissions, 100 to a transaction.
func insertSubmissions(t *testing.T, db *sql.DB, driver string, n int) {
	t.Helper()
	q := "INSERT INTO postino_submissions (id, mail_from, rcpt_to, message) VALUES ($1, $2, $3, $4)"
	if driver == "mysql" {
		q = "INSERT INTO postino_submissions (id, mail_from, rcpt_to, message) VALUES (?, ?, ?, ?)"
	}
	for start := 0; start < n; start += 100 {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		for i := start; i < min(n, start+100); i++ {
			id := fmt.Sprintf("kill-%05d", i)
			var to any = []string{"user@example.net"}
			if driver == "mysql" {
				b, _ := json.Marshal(to)
				to = string(b)
			}
			msg := fmt.Sprintf("From: app@example.com\r\nTo: user@example.net\r\nSubject: %s\r\n\r\n%s\r\n", id, strings.Repeat("memo line\r\n", 50))
			if _, err := tx.Exec(q, id, "app@example.com", to, []byte(msg)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

func submissionIDs(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT id FROM postino_submissions")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}
