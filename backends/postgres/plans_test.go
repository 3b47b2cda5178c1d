package postgres_test

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/internal/sqlstore"
	"github.com/genropy/postino/backends/postgres"
)

var writePlans = flag.Bool("plans", false, "write PLANS.md from TestPlans")

// fillOutbox fills db with 100,000 messages (enough that a scan, or a range
// too wide, shows in the rows read) as a busy outbox holds them, by
// statements of the server's own: half acknowledged over thirty days, a
// fifth READY and not due yet, a tenth READY in a suspended batch, a tenth
// READY and due, the rest being worked on, a few of them past their
// lease; events and alarms, most of them done or not due.
func fillOutbox(t *testing.T, db *pgxpool.Pool, now time.Time) {
	t.Helper()
	ctx := context.Background()
	for _, st := range []string{
		"INSERT INTO email_batches (code, suspended_at) VALUES ('camp', @now)",
		`INSERT INTO emails (id, status, eml_file_path, priority, batch_code, held, created_at, updated_at, due_at, queue_at, lease_until)
		SELECT 'm-' || lpad(i::text, 6, '0'),
			CASE WHEN i % 10 < 5 THEN 'SENT-ACKNOWLEDGED' WHEN i % 10 < 9 THEN 'READY'
				WHEN i % 100 < 39 THEN 'ACCEPTED' WHEN i % 100 < 69 THEN 'PROCESSING' ELSE 'CALLING-SENT-CALLBACK' END,
			'x.eml', i % 4, CASE WHEN i % 10 = 7 THEN 'camp' END, i % 10 = 7,
			@now - make_interval(secs => i), @now - make_interval(days => i % 30, secs => i),
			CASE WHEN i % 10 IN (5, 6) THEN @now + make_interval(secs => i) ELSE @now - make_interval(secs => i) END,
			CASE WHEN i % 10 < 5 THEN @now - make_interval(days => i % 30, secs => i)
				WHEN i % 10 IN (5, 6) THEN @now + make_interval(secs => i) ELSE @now - make_interval(secs => i) END,
			CASE WHEN i % 10 = 9 AND i % 100 >= 39 THEN
				CASE WHEN i % 1000 = 999 THEN @now - interval '1 minute' ELSE @now + interval '1 minute' END END
		FROM generate_series(0, 99999) i`,
		`INSERT INTO email_events (event_id, email_id, seq, outcome, at, state, due_at, updated_at, lease_until)
		SELECT 'e-' || lpad(i::text, 6, '0'), 'm-' || lpad(i::text, 6, '0'), 1, 'SENT', @now,
			CASE WHEN i % 10 = 0 THEN 'acked' WHEN i % 100 = 1 THEN 'pending' WHEN i % 100 = 3 THEN 'calling' ELSE 'acked' END,
			CASE WHEN i % 1000 = 1 THEN @now - interval '1 second' ELSE @now + make_interval(secs => i) END, @now - make_interval(days => i % 30),
			CASE WHEN i % 1000 = 3 THEN @now - interval '1 minute' WHEN i % 100 = 3 THEN @now + interval '1 minute' END
		FROM generate_series(0, 99999) i WHERE i % 10 < 5`,
		`INSERT INTO email_alarms (kind, email_id, due_at)
		SELECT 'pec-receipts', 'm-' || lpad(i::text, 6, '0'),
			CASE WHEN i % 1000 = 0 THEN @now - interval '1 second' ELSE @now + make_interval(secs => i) END
		FROM generate_series(0, 99999) i WHERE i % 10 < 5`,
		"INSERT INTO email_counts (status, shard, n) SELECT status, 0, COUNT(*) FROM emails GROUP BY status",
		// Two hours of counts per minute, every activity in every shard.
		`INSERT INTO email_activity (minute, activity, shard, n)
		SELECT date_trunc('minute', @now) - make_interval(mins => i / 96),
			(ARRAY['ACCEPTED', 'BOUNCED', 'DEFERRED', 'FAILED', 'INVALID', 'SENT'])[i % 6 + 1], (i / 6) % 16, 1
		FROM generate_series(0, 120 * 96 - 1) i`,
		// A suppression list of 100,000 entries, a tenth of a stream,
		// a tenth not active yet, a fifth expiring.
		`INSERT INTO suppressions (` + sqlstore.SuppressionCols + `)
		SELECT 'r' || lpad(i::text, 6, '0') || '@example.com', CASE WHEN i % 10 = 3 THEN 'news' ELSE '*' END,
			'r' || lpad(i::text, 6, '0') || '@example.com',
			(ARRAY['hard_bounce', 'complaint', 'unsubscribe', 'manual', 'import'])[i % 5 + 1], '', '', '', '', @now,
			CASE WHEN i % 5 = 1 THEN @now + make_interval(secs => i) END, 1, @now, i % 10 <> 7, 'relay test', @now
		FROM generate_series(0, 99999) i`,
		"ANALYZE",
		// The list changes little: autovacuum keeps its visibility map,
		// which lets its counts read the index alone.
		"VACUUM suppressions",
	} {
		if _, err := db.Exec(ctx, strings.ReplaceAll(st, "@now", "'"+now.Format(time.RFC3339Nano)+"'::timestamptz")); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
}

// plan is a hot statement and what its plan must be: the index of every
// table access with the columns its condition must bound ("seq:table" for
// a scan of a table), and the rows it may read over every access.
type plan = backendtest.PlanCase[[]string]

// access is one table access of a plan.
type access struct {
	node, table, index, cond, filter string
	rows, read                       float64
}

func (a access) Key() string {
	if a.index == "" {
		return "seq:" + a.table
	}
	return a.index
}

func (a access) Read() float64 { return a.read }

func (a access) Row() string {
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %.0f | %.0f |", a.table, a.node, a.index,
		strings.ReplaceAll(a.cond, "|", `\|`), strings.ReplaceAll(a.filter, "|", `\|`), a.rows, a.read)
}

// TestPlans runs every hot statement under EXPLAIN ANALYZE on a filled
// outbox, in a transaction rolled back, and fails on a scan of a table, a
// sort, an index other than the one meant or a condition on fewer of its
// columns, and on reading more rows than the answer needs. With -plans it
// writes PLANS.md.
func TestPlans(t *testing.T) {
	if testing.Short() {
		t.Skip("fills an outbox of 100,000 messages")
	}
	ctx := context.Background()
	db, err := postgres.Connect(ctx, freshDatabase(t), postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	fillOutbox(t, db, now)

	const limit = 50
	claim := backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now, LeaseUntil: now.Add(time.Minute), Limit: limit}
	ids := []string{"m-000008", "m-000018", "m-000028"}
	late := func(status backends.Status, order string) *sqlstore.ListKey {
		var c sqlstore.ListKey
		var p int16
		err := db.QueryRow(ctx, "SELECT priority, queue_at, created_at, id FROM emails WHERE status = $1 AND claim_held = false ORDER BY "+order+" LIMIT 1 OFFSET 20000", status).
			Scan(&p, &c.At, &c.Created, &c.ID)
		if err != nil {
			t.Fatal(err)
		}
		c.Priority = int(p)
		return &c
	}
	lateReady := late(backends.StatusReady, "priority, queue_at, created_at, id")
	lateAll := late(backends.StatusSentAcknowledged, "created_at DESC, id DESC")
	ready := backends.ListQuery{Status: backends.StatusReady, Limit: limit}
	acked := backends.ListQuery{Status: backends.StatusSentAcknowledged, Limit: limit}
	claimIdx := []string{"status", "claim_held"}
	idx := func(name string, cols ...string) map[string][]string { return map[string][]string{name: cols} }
	claimed := idx("idx_claim", "status", "claim_held", "priority", "queue_at")
	plans := []plan{
		{Name: "claim: due priorities", Stmt: postgres.ClaimDueStmt(claim), Use: claimed, MaxRows: 4},
		{Name: "claim: lock", Stmt: postgres.ClaimStmt(claim, backends.PriorityNormal, limit, ids), Use: claimed, MaxRows: limit},
		{Name: "transitions: lock", Stmt: postgres.MessageLockStmt(ids), Use: idx("emails_pkey", "id"), MaxRows: len(ids)},
		{Name: "list READY: first page", Stmt: postgres.ListStatusStmt(ready, nil, false), Use: idx("idx_claim", claimIdx...), MaxRows: limit + 1},
		{Name: "list READY: held, first page", Stmt: postgres.ListStatusStmt(ready, nil, true), Use: idx("idx_claim", claimIdx...), MaxRows: limit + 1},
		{Name: "list READY: page 400", Stmt: postgres.ListStatusStmt(ready, lateReady, false),
			Use: idx("idx_claim", "status", "claim_held", "priority", "queue_at", "created_at", "id"), MaxRows: limit + 1},
		{Name: "list SENT-ACKNOWLEDGED: first page", Stmt: postgres.ListStatusStmt(acked, nil, false), Use: idx("idx_claim", claimIdx...),
			MaxRows: limit + 1},
		{Name: "list all: first page", Stmt: postgres.ListAllStmt(backends.ListQuery{Limit: limit}, nil), Use: idx("idx_created"), MaxRows: limit + 1},
		{Name: "list all: page 600", Stmt: postgres.ListAllStmt(backends.ListQuery{Limit: limit}, lateAll), Use: idx("idx_created", "created_at", "id"),
			MaxRows: limit + 1},
		{Name: "restore: messages", Stmt: postgres.RestoreStmt(now), Use: idx("idx_status_lease", "status", "lease_until"), MaxRows: 100},
		{Name: "restore: events", Stmt: postgres.RestoreEventsStmt(now, now),
			Use: map[string][]string{"idx_state_lease": {"state", "lease_until"}, "email_events_pkey": {"event_id"}}, MaxRows: 2 * 100},
		{Name: "purge", Stmt: postgres.PurgeStmt(now.Add(-20*24*time.Hour), limit), Use: idx("idx_status_updated", "status", "updated_at"), MaxRows: limit},
		{Name: "counts", Stmt: postgres.CountsStmt, Use: idx("seq:email_counts"), MaxRows: 16 * len(backends.Statuses())},
		// The planner scans a table that holds two hours at most (the
		// housekeeping prunes it) for half of it: twice the answer.
		{Name: "minutes of the last hour", Stmt: postgres.MinutesStmt(now.Add(-59 * time.Minute)), Use: idx("seq:email_activity"),
			MaxRows: 120 * 16 * len(backends.Activities())},
		{Name: "alarms due", Stmt: postgres.DueAlarmsStmt(backends.AlarmPECReceipts, now, limit), Use: idx("idx_alarm_due", "kind", "due_at"), MaxRows: limit},
		{Name: "event claim: pick", Stmt: postgres.EventPickStmt(backends.EventClaim{Now: now, LeaseUntil: now.Add(time.Minute), Limit: limit}),
			Use: map[string][]string{"idx_state_due_seq": {"state", "due_at"}, "idx_email_seq": {"email_id", "seq"}}, MaxRows: 3 * limit},
		{Name: "event claim: lock", Stmt: postgres.EventLockStmt([]string{"e-000001", "e-000101"}, true), Use: idx("email_events_pkey", "event_id"), MaxRows: 2},
		{Name: "new events: last numbers", Stmt: postgres.LastSeqStmt([]string{"m-000001", "m-000002", "m-000003"}), Use: idx("idx_email_seq", "email_id"),
			MaxRows: 6},
		{Name: "suspend a batch", Stmt: postgres.HoldBatchStmt("camp", true), Use: idx("idx_batch", "batch_code"), MaxRows: 10000},
		{Name: "list a batch: first page", Stmt: postgres.ListBatchStmt(backends.ListQuery{Batch: "camp", Limit: limit}, nil),
			Use: idx("idx_batch", "batch_code"), MaxRows: limit + 1},
		{Name: "list a batch: page 100", Stmt: postgres.ListBatchStmt(backends.ListQuery{Batch: "camp", Limit: limit}, &sqlstore.ListKey{ID: "m-050007"}),
			Use: idx("idx_batch", "batch_code", "id"), MaxRows: limit + 1},
		{Name: "list a batch: READY, page 100", Stmt: postgres.ListBatchStmt(backends.ListQuery{Batch: "camp", Status: backends.StatusReady, Limit: limit},
			&sqlstore.ListKey{ID: "m-050007"}), Use: idx("idx_batch", "batch_code", "id"), MaxRows: limit + 1},
		{Name: "batch counts", Stmt: postgres.BatchCountsStmt("camp"), Use: idx("idx_batch", "batch_code"), MaxRows: 10000},
		{Name: "suppressed: a message's recipients", Stmt: postgres.SuppressionStmts.Blocking("news", []string{"r000003@example.com", "r000004@example.com", "nobody@example.com"}, now),
			Use: idx("suppressions_pkey", "addr_key"), MaxRows: 6},
		{Name: "suppressions: list by reason, a later page", Stmt: sqlstore.SuppressionPageStmt(postgres.SuppressionStmts, backends.SuppressionQuery{Reason: backends.ReasonComplaint},
			&[2]string{"r050001@example.com", "*"}, limit+1), Use: idx("idx_sup_reason", "active", "reason", "addr_key"), MaxRows: limit + 2},
		{Name: "suppressions: list by prefix, a later page", Stmt: sqlstore.SuppressionPageStmt(postgres.SuppressionStmts, backends.SuppressionQuery{Prefix: "r05"},
			&[2]string{"r050001@example.com", "*"}, limit+1), Use: idx("suppressions_pkey", "addr_key"), MaxRows: 2 * (limit + 1)},
		{Name: "suppressions: counts", Stmt: sqlstore.Stmt{Query: sqlstore.SuppressionCountsQuery}, Use: idx("idx_sup_counts"),
			MaxRows: 100000},
		{Name: "event updates: lock", Stmt: postgres.EventLockStmt([]string{"e-000003", "e-000103"}, false), Use: idx("email_events_pkey", "event_id"), MaxRows: 2},
	}
	backendtest.Plans[[]string, access]{Cases: plans, Access: readAccess, Check: checkAccess, Header: plansHeader,
		TableHead: "| table | access | index | index condition | filter | rows | read |\n|---|---|---|---|---|---|---|\n",
		Explain: func(p plan) ([]byte, error) {
			var js []byte
			// Run, rolled back: writes and locks are measured too.
			err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+p.Stmt.Query, p.Stmt.Args...).Scan(&js); err != nil {
					return err
				}
				return errRollback
			})
			if err != errRollback {
				return nil, err
			}
			return js, nil
		}}.Run(t, *writePlans)
}

var errRollback = fmt.Errorf("rolled back")

// readAccess reads a node of an EXPLAIN in JSON: a table access, and
// whether it sorts.
func readAccess(v map[string]any) (access, bool, bool) {
	node, _ := v["Node Type"].(string)
	sorts := node == "Sort" || node == "Incremental Sort"
	table, _ := v["Relation Name"].(string)
	index, _ := v["Index Name"].(string)
	if !strings.HasSuffix(node, "Scan") || table == "" && index == "" || node == "Bitmap Heap Scan" {
		return access{}, false, sorts
	}
	a := access{node: node, table: table, index: index}
	a.cond, _ = v["Index Cond"].(string)
	a.filter, _ = v["Filter"].(string)
	a.rows, _ = v["Plan Rows"].(float64)
	loops, _ := v["Actual Loops"].(float64)
	rows, _ := v["Actual Rows"].(float64)
	removed, _ := v["Rows Removed by Filter"].(float64)
	a.read = loops * (rows + removed)
	return a, true, sorts
}

// checkAccess fails on an index condition that bounds fewer of its
// columns than want.
func checkAccess(t *testing.T, p plan, a access, want []string) {
	t.Helper()
	for _, c := range want {
		if !strings.Contains(a.cond, c) {
			t.Errorf("%s: the condition on %s, %q, does not bound %s", p.Name, a.index, a.cond, c)
		}
	}
}

const plansHeader = `# PostgreSQL plans of the hot statements

Written by ` + "`go test ./backends/postgres -run TestPlans -plans`" + ` on an outbox of 100,000
messages (half acknowledged over thirty days, a fifth READY and not due, a tenth
READY in a suspended batch, a tenth READY and due, the rest being worked on) with
their events and alarms, and a suppression list of 100,000 entries (vacuumed), after
ANALYZE; pages and claims of 50. Each statement
runs under EXPLAIN ANALYZE in a transaction rolled back (writes and locks too), as
the store runs it: planned for its values (plan_cache_mode force_custom_plan).
TestPlans fails on a scan of a table (but the counters'), a sort, another index or
a condition that bounds fewer of its columns than below, and on reading more rows
than the answer needs. "rows" is the planner's estimate; "read" the rows the scan
returned and filtered out, over its loops.

`
