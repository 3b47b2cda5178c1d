package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	driver "github.com/go-sql-driver/mysql"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/mysql"
	"github.com/genropy/postino/internal/testrig/sqltest"
)

// loadMessages is how many messages TestTwoRelays takes through their
// whole life.
const loadMessages = 1000

// TestTwoRelays runs the relay's traffic through two stores on one
// database, as two relays sharing it: sessions create messages, intake and
// delivery workers claim them and move each on, the dispatcher claims the
// events and acknowledges them. Every message must end acknowledged, the
// counters exact; the log says what a message cost the server: statements
// and commits of the relays' own database user where the server keeps
// user statistics (MariaDB), of the whole server otherwise, and the
// server's lock waits and deadlocks (other clients during the run add to
// those).
func TestTwoRelays(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 1,000 messages through their life")
	}
	ctx := context.Background()
	dsn, user := loadUser(t, freshDatabase(t))
	var relays [2]*mysql.Store
	for i := range relays {
		s, err := mysql.Open(ctx, dsn, mysql.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		relays[i] = s
	}
	admin, err := mysql.Connect(ctx, dsn, mysql.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()

	before := serverCounters(t, admin, user)
	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var failed atomic.Value
	fail := func(err error) {
		if err != nil && runCtx.Err() == nil {
			failed.CompareAndSwap(nil, err)
			stop()
		}
	}
	var next atomic.Int64
	for i, s := range relays {
		for range 8 {
			wg.Go(func() {
				for n := next.Add(1); n <= loadMessages && runCtx.Err() == nil; n = next.Add(1) {
					m := &backends.Message{ID: fmt.Sprintf("load-%d", n), Priority: int(n % 4), EmlPath: fmt.Sprintf("r%d/%d.eml", i, n),
						Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{"user@example.net"}}}
					fail(s.Create(runCtx, m))
				}
			})
		}
		wg.Go(func() { work(runCtx, fail, intake(s)) })
		wg.Go(func() { work(runCtx, fail, deliver(s)) })
		wg.Go(func() { work(runCtx, fail, dispatch(s)) })
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		n, err := relays[0].Counts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n[backends.StatusSentAcknowledged] == loadMessages || failed.Load() != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	wg.Wait()
	elapsed := time.Since(start)
	after := serverCounters(t, admin, user)
	if err, _ := failed.Load().(error); err != nil {
		t.Fatal(err)
	}
	want := map[backends.Status]int{backends.StatusSentAcknowledged: loadMessages}
	if n, _ := relays[1].Counts(ctx); !maps.Equal(n, want) {
		t.Fatalf("Counts = %v, want %v", n, want)
	}
	if n := scanCounts(t, admin); !maps.Equal(n, want) {
		t.Fatalf("the rows hold %v, want %v", n, want)
	}
	per := func(a, b int64) float64 { return float64(a-b) / loadMessages }
	t.Logf("%d messages in %s: per message %.2f statements, %.3f commits (%s); "+
		"Innodb_row_lock_waits +%d, Innodb_deadlocks +%d (the server's)", loadMessages, elapsed.Round(time.Millisecond),
		per(after.statements, before.statements), per(after.commits, before.commits), after.of,
		after.lockWaits-before.lockWaits, after.deadlocks-before.deadlocks)
}

// work runs step until ctx ends, pausing a moment when it found nothing.
func work(ctx context.Context, fail func(error), step func(context.Context) (int, error)) {
	for ctx.Err() == nil {
		n, err := step(ctx)
		fail(err)
		if n == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
}

// each runs fn on every message at once, as the workers do, and waits.
func each[T any](items []T, fn func(T) error) error {
	errs := make([]error, len(items))
	var wg sync.WaitGroup
	for i, it := range items {
		wg.Go(func() { errs[i] = fn(it) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func intake(s *mysql.Store) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		now := time.Now().UTC()
		ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusAccepted, To: backends.StatusIntaking, Now: now,
			LeaseUntil: now.Add(time.Minute), Limit: 32, Reason: "intake"})
		if err != nil {
			return 0, err
		}
		return len(ms), each(ms, func(m *backends.Message) error {
			return s.Transition(ctx, backends.Transition{ID: m.ID, From: backends.StatusIntaking, To: backends.StatusReady,
				Reason: "prepared", Route: "smarthost"})
		})
	}
}

func deliver(s *mysql.Store) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		now := time.Now().UTC()
		ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now,
			LeaseUntil: now.Add(time.Minute), Limit: 32, Reason: "delivery"})
		if err != nil {
			return 0, err
		}
		return len(ms), each(ms, func(m *backends.Message) error {
			return s.Transition(ctx, backends.Transition{ID: m.ID, From: backends.StatusProcessing, To: backends.StatusSent,
				Reason: "250 ok", AddAttempt: true, Results: m.RecipientResults(),
				Event: backends.OutcomeEvent(backends.StatusProcessing, backends.StatusSent, "250 ok", nil)})
		})
	}
}

func dispatch(s *mysql.Store) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		now := time.Now().UTC()
		es, err := s.ClaimEvents(ctx, backends.EventClaim{Now: now, LeaseUntil: now.Add(time.Minute), Limit: 32, Reason: "dispatch"})
		if err != nil {
			return 0, err
		}
		return len(es), each(es, func(e *backends.Event) error {
			_, err := s.UpdateEvent(ctx, backends.EventUpdate{ID: e.ID, From: backends.EventCalling, To: backends.EventAcked, Reason: "told"})
			return err
		})
	}
}

// loadUser makes a database user of the test's own, when the server keeps
// statistics per user (MariaDB's userstat, switched on for the test), and
// returns the DSN of dsn's database as that user; otherwise dsn and "".
func loadUser(t *testing.T, dsn string) (string, string) {
	t.Helper()
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	var was int
	if admin.QueryRow("SELECT @@GLOBAL.userstat").Scan(&was) != nil {
		return dsn, ""
	}
	cfg, err := driver.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	user := fmt.Sprintf("postino_load_%d", os.Getpid())
	for _, st := range []string{
		"SET GLOBAL userstat = 1",
		"CREATE USER IF NOT EXISTS " + user,
		"GRANT ALL ON " + cfg.DBName + ".* TO " + user,
	} {
		if _, err := admin.Exec(st); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
	t.Cleanup(func() {
		if db, err := sql.Open("mysql", sqltest.ServerDSN("mysql")); err == nil {
			db.Exec("DROP USER IF EXISTS " + user)
			if was == 0 {
				db.Exec("SET GLOBAL userstat = 0")
			}
			db.Close()
		}
	})
	cfg.User, cfg.Passwd = user, ""
	return cfg.FormatDSN(), user
}

// counters are what the server counted of a run.
type counters struct {
	statements, commits, lockWaits, deadlocks int64
	// of says whose statements and commits: the test's user, or the
	// whole server's.
	of string
}

// serverCounters reads the statements and commits of user (of the whole
// server when user is ""), and the server's lock waits and deadlocks.
func serverCounters(t *testing.T, db *sql.DB, user string) counters {
	t.Helper()
	global := map[string]int64{}
	rows, err := db.Query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Com_commit', 'Innodb_row_lock_waits', 'Innodb_deadlocks')")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var v int64
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		global[k] = v
	}
	c := counters{statements: global["Questions"], commits: global["Com_commit"], lockWaits: global["Innodb_row_lock_waits"],
		deadlocks: global["Innodb_deadlocks"], of: "the server's Questions and Com_commit"}
	if user != "" {
		c.of = "user statistics of " + user
		err := db.QueryRow(`SELECT SELECT_COMMANDS + UPDATE_COMMANDS + OTHER_COMMANDS, COMMIT_TRANSACTIONS
			FROM information_schema.USER_STATISTICS WHERE USER = ?`, user).Scan(&c.statements, &c.commits)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			t.Fatal(err)
		}
	}
	return c
}

// scanCounts counts the rows of each status, as the counters must.
func scanCounts(t *testing.T, db *sql.DB) map[backends.Status]int {
	t.Helper()
	rows, err := db.Query("SELECT status, COUNT(*) FROM emails GROUP BY status")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[backends.Status]int{}
	for rows.Next() {
		var st backends.Status
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			t.Fatal(err)
		}
		out[st] = n
	}
	return out
}
