package mysql_test

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/internal/sqlstore"
	"github.com/genropy/postino/backends/mysql"
)

var writePlans = flag.Bool("plans", false, "write PLANS.md from TestPlans")

// fillOutbox fills db with 100,000 messages (enough that a scan, or a range
// too wide, shows in the rows read) as a busy outbox holds them,
// by statements of the server's own (no round trip per row): half
// acknowledged over thirty days, a fifth READY and not due yet, a tenth
// READY in a suspended batch, a tenth READY and due, the rest being worked
// on, a few of them past their lease; events and alarms, most of them done
// or not due.
func fillOutbox(t *testing.T, db *sql.DB, now time.Time) {
	t.Helper()
	for _, st := range []string{
		"CREATE TABLE digits (d INT PRIMARY KEY)",
		"INSERT INTO digits VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)",
		`CREATE TABLE seq (i INT PRIMARY KEY) SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d AS i
			FROM digits a, digits b, digits c, digits e, digits f`,
		"INSERT INTO email_batches (code, suspended_at) VALUES ('camp', @now)",
		`INSERT INTO emails (id, status, eml_file_path, priority, batch_code, held, created_at, updated_at, due_at, queue_at, lease_until)
		SELECT CONCAT('m-', LPAD(i, 6, '0')),
			CASE WHEN i % 10 < 5 THEN 'SENT-ACKNOWLEDGED' WHEN i % 10 < 9 THEN 'READY'
				WHEN i % 100 < 39 THEN 'ACCEPTED' WHEN i % 100 < 69 THEN 'PROCESSING' ELSE 'CALLING-SENT-CALLBACK' END,
			'x.eml', i % 4, IF(i % 10 = 7, 'camp', NULL), i % 10 = 7,
			@now - INTERVAL i SECOND, @now - INTERVAL (i % 30) DAY - INTERVAL i SECOND,
			IF(i % 10 IN (5, 6), @now + INTERVAL i SECOND, @now - INTERVAL i SECOND),
			CASE WHEN i % 10 < 5 THEN @now - INTERVAL (i % 30) DAY - INTERVAL i SECOND
				WHEN i % 10 IN (5, 6) THEN @now + INTERVAL i SECOND ELSE @now - INTERVAL i SECOND END,
			IF(i % 10 = 9 AND i % 100 >= 39, IF(i % 1000 = 999, @now - INTERVAL 1 MINUTE, @now + INTERVAL 1 MINUTE), NULL)
		FROM seq`,
		`INSERT INTO email_events (event_id, email_id, seq, outcome, at, state, due_at, updated_at, lease_until)
		SELECT CONCAT('e-', LPAD(i, 6, '0')), CONCAT('m-', LPAD(i, 6, '0')), 1, 'SENT', @now,
			CASE WHEN i % 10 = 0 THEN 'acked' WHEN i % 100 = 1 THEN 'pending' WHEN i % 100 = 3 THEN 'calling' ELSE 'acked' END,
			IF(i % 1000 = 1, @now - INTERVAL 1 SECOND, @now + INTERVAL i SECOND), @now - INTERVAL (i % 30) DAY,
			CASE WHEN i % 1000 = 3 THEN @now - INTERVAL 1 MINUTE WHEN i % 100 = 3 THEN @now + INTERVAL 1 MINUTE END
		FROM seq WHERE i % 10 < 5`,
		`INSERT INTO email_alarms (kind, email_id, due_at)
		SELECT 'pec-receipts', CONCAT('m-', LPAD(i, 6, '0')), IF(i % 1000 = 0, @now - INTERVAL 1 SECOND, @now + INTERVAL i SECOND)
		FROM seq WHERE i % 10 < 5`,
		"INSERT INTO email_counts (status, shard, n) SELECT status, 0, COUNT(*) FROM emails GROUP BY status",
		// Two hours of counts per minute, every activity in every shard.
		`INSERT INTO email_activity (minute, activity, shard, n)
		SELECT TIMESTAMP(DATE_FORMAT(@now, '%Y-%m-%d %H:%i:00')) - INTERVAL (i DIV 96) MINUTE,
			ELT(i % 6 + 1, 'ACCEPTED', 'BOUNCED', 'DEFERRED', 'FAILED', 'INVALID', 'SENT'), (i DIV 6) % 16, 1
		FROM seq WHERE i < 120 * 96`,
		// A suppression list of 100,000 entries, a tenth of a stream,
		// a tenth not active yet, a fifth expiring.
		`INSERT INTO suppressions (` + sqlstore.SuppressionCols + `)
		SELECT CONCAT('r', LPAD(i, 6, '0'), '@example.com'), IF(i % 10 = 3, 'news', '*'), CONCAT('r', LPAD(i, 6, '0'), '@example.com'),
			ELT(i % 5 + 1, 'hard_bounce', 'complaint', 'unsubscribe', 'manual', 'import'), '', '', '', '', @now, IF(i % 5 = 1, @now + INTERVAL i SECOND, NULL),
			1, @now, i % 10 <> 7, 'relay test', @now
		FROM seq`,
		"ANALYZE TABLE emails, email_events, email_alarms, email_counts, email_activity, suppressions",
	} {
		if _, err := db.Exec(strings.ReplaceAll(st, "@now", "'"+now.Format("2006-01-02 15:04:05.000000")+"'")); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
}

// plan is a hot statement and what its plan must be: the index of every
// table access, as "table/index", with how many of its columns it must
// use at least. MaxRows bounds the rows it reads (ANALYZE, for reads); 0
// for writes, which are only explained.
type plan = backendtest.PlanCase[int]

// access is one table access of a plan.
type access struct {
	table, typ, key, keyLen string
	parts                   []string
	rows, readRows          float64
	// analyzed: the statement ran (ANALYZE), and readRows counts.
	analyzed bool
	extra    []string
}

func (a access) Key() string   { return a.table + "/" + a.key }
func (a access) Read() float64 { return a.readRows }

func (a access) Row() string {
	read := "-"
	if a.analyzed {
		read = fmt.Sprintf("%.0f", a.readRows)
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %.0f | %s | %s |", a.table, a.typ, a.key, a.keyLen,
		strings.Join(a.parts, ", "), a.rows, read, strings.Join(a.extra, "; "))
}

// TestPlans explains every hot statement on a filled outbox and fails on a
// full scan, a sort, an index other than the one meant or used on fewer
// columns than meant, and (for reads, run by ANALYZE) on reading more rows
// than the answer needs. With -plans it writes PLANS.md.
func TestPlans(t *testing.T) {
	if testing.Short() {
		t.Skip("fills an outbox of 100,000 messages")
	}
	ctx := context.Background()
	db, err := mysql.Connect(ctx, freshDatabase(t), mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	fillOutbox(t, db, now)

	const limit = 50
	claim := backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now, LeaseUntil: now.Add(time.Minute), Limit: limit}
	ids := []any{"m-000008", "m-000018", "m-000028"}
	late := func(status backends.Status, order string) *sqlstore.ListKey {
		var c sqlstore.ListKey
		err := db.QueryRow("SELECT priority, queue_at, created_at, id FROM emails WHERE status = ? AND claim_held = 0 ORDER BY "+order+" LIMIT 1 OFFSET 20000", status).
			Scan(&c.Priority, &c.At, &c.Created, &c.ID)
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	lateReady := late(backends.StatusReady, "priority, queue_at, created_at, id")
	lateAll := late(backends.StatusSentAcknowledged, "created_at DESC, id DESC")
	ready := backends.ListQuery{Status: backends.StatusReady, Limit: limit}
	acked := backends.ListQuery{Status: backends.StatusSentAcknowledged, Limit: limit}
	byID := "emails/PRIMARY"
	page := func(parts int) map[string]int { return map[string]int{"emails/idx_claim": parts, byID: 1} }
	plans := []plan{
		{Name: "claim: pick", Stmt: mysql.ClaimPickStmt(claim, limit), Use: map[string]int{"emails/idx_claim": 4}, MaxRows: limit + 1},
		{Name: "claim: lock", Stmt: mysql.ClaimLockStmt(claim, ids), Use: map[string]int{byID: 1}, MaxRows: len(ids)},
		{Name: "transitions: lock", Stmt: mysql.MessageLockStmt(ids), Use: map[string]int{byID: 1, "v/idx_email_seq": 1}, MaxRows: len(ids)},
		{Name: "list READY: first page", Stmt: mysql.ListStatusStmt(ready, nil, false), Use: page(2), MaxRows: 2 * (limit + 1)},
		{Name: "list READY: held, first page", Stmt: mysql.ListStatusStmt(ready, nil, true), Use: page(2), MaxRows: 2 * (limit + 1)},
		{Name: "list READY: page 400", Stmt: mysql.ListStatusStmt(ready, lateReady, false), Use: page(6), MaxRows: 2 * (limit + 1)},
		{Name: "list SENT-ACKNOWLEDGED: first page", Stmt: mysql.ListStatusStmt(acked, nil, false), Use: page(2), MaxRows: 2 * (limit + 1)},
		{Name: "list all: first page", Stmt: mysql.ListAllStmt(backends.ListQuery{Limit: limit}, nil), Use: map[string]int{"emails/idx_created": 1}, MaxRows: limit + 1},
		{Name: "list all: page 600", Stmt: mysql.ListAllStmt(backends.ListQuery{Limit: limit}, lateAll), Use: map[string]int{"emails/idx_created": 2}, MaxRows: limit + 1},
		{Name: "restore: messages", Stmt: mysql.RestoreStmt(now), Use: map[string]int{"emails/idx_status_lease": 2}, MaxRows: 100},
		{Name: "restore: events", Stmt: mysql.RestoreEventsStmt(now, now), Use: map[string]int{"email_events/idx_state_lease": 2}, MaxRows: 0},
		{Name: "purge", Stmt: mysql.PurgeStmt(now.Add(-20*24*time.Hour), limit), Use: map[string]int{"emails/idx_status_updated": 2}, MaxRows: limit},
		{Name: "counts", Stmt: mysql.CountsStmt, Use: map[string]int{"email_counts/PRIMARY": 0}, MaxRows: 16 * len(backends.Statuses()),
			Scan: true},
		{Name: "minutes of the last hour", Stmt: mysql.MinutesStmt(now.Add(-59 * time.Minute)), Use: map[string]int{"email_activity/PRIMARY": 1},
			MaxRows: 60 * 16 * len(backends.Activities())},
		{Name: "alarms due", Stmt: mysql.DueAlarmsStmt(backends.AlarmPECReceipts, now, limit), Use: map[string]int{"email_alarms/idx_alarm_due": 2}, MaxRows: limit},
		{Name: "event claim: pick", Stmt: mysql.EventPickStmt(backends.EventClaim{Now: now, LeaseUntil: now.Add(time.Minute), Limit: limit}),
			Use: map[string]int{"e/idx_state_due_seq": 2, "p/idx_email_seq": 1}, MaxRows: 3 * limit},
		{Name: "event claim: lock", Stmt: mysql.EventLockStmt([]any{"e-000001", "e-000101"}, true), Use: map[string]int{"email_events/PRIMARY": 1}, MaxRows: 2},
		{Name: "suspend a batch", Stmt: mysql.HoldBatchStmt("camp", true), Use: map[string]int{"emails/idx_batch": 1}, MaxRows: 0},
		{Name: "list a batch: first page", Stmt: mysql.ListBatchStmt(backends.ListQuery{Batch: "camp", Limit: limit}, nil),
			Use: map[string]int{"emails/idx_batch": 1}, MaxRows: limit + 1},
		{Name: "list a batch: page 100", Stmt: mysql.ListBatchStmt(backends.ListQuery{Batch: "camp", Limit: limit}, &sqlstore.ListKey{ID: "m-050007"}),
			Use: map[string]int{"emails/idx_batch": 2}, MaxRows: limit + 1},
		{Name: "list a batch: READY, page 100", Stmt: mysql.ListBatchStmt(backends.ListQuery{Batch: "camp", Status: backends.StatusReady, Limit: limit},
			&sqlstore.ListKey{ID: "m-050007"}), Use: map[string]int{"emails/idx_batch": 2}, MaxRows: limit + 1},
		{Name: "batch counts", Stmt: mysql.BatchCountsStmt("camp"), Use: map[string]int{"emails/idx_batch": 1}, MaxRows: 10000},
		{Name: "suppressed: a message's recipients", Stmt: mysql.SuppressionStmts.Blocking("news", []string{"r000003@example.com", "r000004@example.com", "nobody@example.com"}, now),
			Use: map[string]int{"suppressions/PRIMARY": 2}, MaxRows: 6},
		{Name: "suppressions: list by reason, a later page", Stmt: sqlstore.SuppressionPageStmt(mysql.SuppressionStmts, backends.SuppressionQuery{Reason: backends.ReasonComplaint},
			&[2]string{"r050001@example.com", "*"}, limit+1), Use: map[string]int{"suppressions/idx_sup_reason": 2}, MaxRows: limit + 1},
		{Name: "suppressions: list by prefix, a later page", Stmt: sqlstore.SuppressionPageStmt(mysql.SuppressionStmts, backends.SuppressionQuery{Prefix: "r05"},
			&[2]string{"r050001@example.com", "*"}, limit+1), Use: map[string]int{"suppressions/PRIMARY": 1}, MaxRows: 2 * (limit + 1)},
		{Name: "suppressions: counts", Stmt: sqlstore.Stmt{Query: sqlstore.SuppressionCountsQuery}, Use: map[string]int{"suppressions/idx_sup_reason": 1},
			MaxRows: 100000},
		{Name: "event updates: lock", Stmt: mysql.EventLockStmt([]any{"e-000003", "e-000103"}, false), Use: map[string]int{"email_events/PRIMARY": 1}, MaxRows: 2},
	}

	backendtest.Plans[int, access]{Cases: plans, Access: readAccess, Check: checkAccess, Header: plansHeader,
		TableHead: "| table | access | key | key_len | columns used | rows | read | extra |\n|---|---|---|---|---|---|---|---|\n",
		Explain: func(p plan) ([]byte, error) {
			verb := "EXPLAIN"
			if p.MaxRows > 0 {
				verb = "ANALYZE"
			}
			var js string
			err := db.QueryRow(verb+" FORMAT=JSON "+p.Stmt.Query, p.Stmt.Args...).Scan(&js)
			return []byte(js), err
		}}.Run(t, *writePlans)
}

// readAccess reads a node of an EXPLAIN or ANALYZE in JSON: a table
// access, and whether it sorts.
func readAccess(v map[string]any) (access, bool, bool) {
	_, sorts := v["filesort"]
	name, ok := v["table_name"].(string)
	if !ok || strings.HasPrefix(name, "<") {
		return access{}, false, sorts
	}
	a := access{table: name}
	a.typ, _ = v["access_type"].(string)
	a.key, _ = v["key"].(string)
	a.keyLen, _ = v["key_length"].(string)
	for _, e := range [][2]string{{"using_index", "Using index"}, {"index_condition", "Using index condition"}, {"attached_condition", "Using where"}} {
		if _, ok := v[e[0]]; ok {
			a.extra = append(a.extra, e[1])
		}
	}
	for _, p := range asSlice(v["used_key_parts"]) {
		a.parts = append(a.parts, fmt.Sprint(p))
	}
	a.rows, _ = v["rows"].(float64)
	loops, analyzed := v["r_loops"].(float64)
	rows, _ := v["r_rows"].(float64)
	a.readRows, a.analyzed = loops*rows, analyzed
	return a, true, sorts
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// checkAccess fails on a full scan the plan does not allow, and on an
// index used on fewer columns than it wants.
func checkAccess(t *testing.T, p plan, a access, want int) {
	t.Helper()
	// A walk of a whole index is a scan, unless it stops at the page's
	// end, as ANALYZE shows.
	if (a.typ == "ALL" || a.typ == "index" && p.MaxRows == 0) && !p.Scan {
		t.Errorf("%s: %s is scanned whole (%s)", p.Name, a.table, a.typ)
	}
	if len(a.parts) < want {
		t.Errorf("%s: %s uses %v of %s, want %d columns at least", p.Name, a.table, a.parts, a.key, want)
	}
}

const plansHeader = `# MySQL/MariaDB plans of the hot statements

Written by ` + "`go test ./backends/mysql -run TestPlans -plans`" + ` on an outbox of 100,000
messages (half acknowledged over thirty days, a fifth READY and not due, a tenth
READY in a suspended batch, a tenth READY and due, the rest being worked on) with
their events and alarms, and a suppression list of 100,000 entries, after ANALYZE
TABLE; pages and claims of 50. TestPlans
fails on a full scan, a sort, another index or fewer of its columns than below,
and on reading more rows than the answer needs. "rows" is the optimizer's
estimate; "read" the rows ANALYZE counted (reads only: writes are explained, not
run).

`
