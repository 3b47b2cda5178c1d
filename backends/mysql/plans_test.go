package mysql_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
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
		"ANALYZE TABLE emails, email_events, email_alarms, email_counts, email_activity",
	} {
		if _, err := db.Exec(strings.ReplaceAll(st, "@now", "'"+now.Format("2006-01-02 15:04:05.000000")+"'")); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
}

// plan is a hot statement and what its plan must be.
type plan struct {
	name string
	st   sqlstore.Stmt
	// use names the index of every table access, as "table/index", with
	// how many of its columns it must use at least.
	use map[string]int
	// maxRows bounds the rows the statement reads, over every access
	// (ANALYZE, for reads); 0 for writes, which are only explained.
	maxRows int
	// scan allows a full scan: of the counters, a table of a few rows.
	scan bool
}

// access is one table access of a plan.
type access struct {
	table, typ, key, keyLen string
	parts                   []string
	rows, readRows          float64
	extra                   []string
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
		{"claim: pick", mysql.ClaimPickStmt(claim, limit), map[string]int{"emails/idx_claim": 4}, limit + 1, false},
		{"claim: lock", mysql.ClaimLockStmt(claim, ids), map[string]int{byID: 1}, len(ids), false},
		{"transitions: lock", mysql.MessageLockStmt(ids), map[string]int{byID: 1, "v/idx_email_seq": 1}, len(ids), false},
		{"list READY: first page", mysql.ListStatusStmt(ready, nil, false), page(2), 2 * (limit + 1), false},
		{"list READY: held, first page", mysql.ListStatusStmt(ready, nil, true), page(2), 2 * (limit + 1), false},
		{"list READY: page 400", mysql.ListStatusStmt(ready, lateReady, false), page(6), 2 * (limit + 1), false},
		{"list SENT-ACKNOWLEDGED: first page", mysql.ListStatusStmt(acked, nil, false), page(2), 2 * (limit + 1), false},
		{"list all: first page", mysql.ListAllStmt(backends.ListQuery{Limit: limit}, nil), map[string]int{"emails/idx_created": 1}, limit + 1, false},
		{"list all: page 600", mysql.ListAllStmt(backends.ListQuery{Limit: limit}, lateAll), map[string]int{"emails/idx_created": 2}, limit + 1, false},
		{"restore: messages", mysql.RestoreStmt(now), map[string]int{"emails/idx_status_lease": 2}, 100, false},
		{"restore: events", mysql.RestoreEventsStmt(now, now), map[string]int{"email_events/idx_state_lease": 2}, 0, false},
		{"purge", mysql.PurgeStmt(now.Add(-20*24*time.Hour), limit), map[string]int{"emails/idx_status_updated": 2}, limit, false},
		{"counts", mysql.CountsStmt, map[string]int{"email_counts/PRIMARY": 0}, 16 * len(backends.Statuses()), true},
		{"minutes of the last hour", mysql.MinutesStmt(now.Add(-59 * time.Minute)), map[string]int{"email_activity/PRIMARY": 1},
			60 * 16 * len(backends.Activities()), false},
		{"alarms due", mysql.DueAlarmsStmt(backends.AlarmPECReceipts, now, limit), map[string]int{"email_alarms/idx_alarm_due": 2}, limit, false},
		{"event claim: pick", mysql.EventPickStmt(backends.EventClaim{Now: now, LeaseUntil: now.Add(time.Minute), Limit: limit}),
			map[string]int{"e/idx_state_due_seq": 2, "p/idx_email_seq": 1}, 3 * limit, false},
		{"event claim: lock", mysql.EventLockStmt([]any{"e-000001", "e-000101"}, true), map[string]int{"email_events/PRIMARY": 1}, 2, false},
		{"suspend a batch", mysql.HoldBatchStmt("camp", true), map[string]int{"emails/idx_batch": 1}, 0, false},
		{"event updates: lock", mysql.EventLockStmt([]any{"e-000003", "e-000103"}, false), map[string]int{"email_events/PRIMARY": 1}, 2, false},
	}
	var doc strings.Builder
	for _, p := range plans {
		query, args := p.st.Query, p.st.Args
		verb := "EXPLAIN"
		if p.maxRows > 0 {
			verb = "ANALYZE"
		}
		var js string
		if err := db.QueryRow(verb+" FORMAT=JSON "+query, args...).Scan(&js); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		accesses, sorted := readPlan(t, js)
		checkPlan(t, p, accesses, sorted)
		if os.Getenv("PLANS_DEBUG") == p.name {
			t.Log(js)
		}
		writePlan(&doc, p, query, accesses)
	}
	if *writePlans {
		if err := os.WriteFile("PLANS.md", []byte(plansHeader+doc.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// readPlan lists the table accesses of an EXPLAIN or ANALYZE in JSON, and
// whether it sorts.
func readPlan(t *testing.T, js string) ([]access, bool) {
	var tree any
	if err := json.Unmarshal([]byte(js), &tree); err != nil {
		t.Fatal(err)
	}
	var out []access
	sorted := false
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["filesort"]; ok {
				sorted = true
			}
			if name, ok := v["table_name"].(string); ok && !strings.HasPrefix(name, "<") {
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
				loops, _ := v["r_loops"].(float64)
				rows, _ := v["r_rows"].(float64)
				a.readRows = loops * rows
				out = append(out, a)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(tree)
	return out, sorted
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func checkPlan(t *testing.T, p plan, accesses []access, sorted bool) {
	t.Helper()
	if len(accesses) == 0 {
		t.Errorf("%s: no table access in the plan", p.name)
	}
	if sorted {
		t.Errorf("%s: the plan sorts", p.name)
	}
	read := 0.0
	used := map[string]bool{}
	for _, a := range accesses {
		k := a.table + "/" + a.key
		want, ok := p.use[k]
		if !ok {
			t.Errorf("%s: %s read through %q, want one of %v", p.name, a.table, a.key, p.use)
		}
		used[k] = true
		// A walk of a whole index is a scan, unless it stops at the
		// page's end, as ANALYZE shows.
		if a.typ == "ALL" || a.typ == "index" && p.maxRows == 0 {
			if !p.scan {
				t.Errorf("%s: %s is scanned whole (%s)", p.name, a.table, a.typ)
			}
		}
		if len(a.parts) < want {
			t.Errorf("%s: %s uses %v of %s, want %d columns at least", p.name, a.table, a.parts, a.key, want)
		}
		read += a.readRows
	}
	for k := range p.use {
		if !used[k] {
			t.Errorf("%s: %s unused", p.name, k)
		}
	}
	if p.maxRows > 0 && read > float64(p.maxRows) {
		t.Errorf("%s: read %.0f rows, want at most %d", p.name, read, p.maxRows)
	}
}

const plansHeader = `# MySQL/MariaDB plans of the hot statements

Written by ` + "`go test ./backends/mysql -run TestPlans -plans`" + ` on an outbox of 100,000
messages (half acknowledged over thirty days, a fifth READY and not due, a tenth
READY in a suspended batch, a tenth READY and due, the rest being worked on) with
their events and alarms, after ANALYZE TABLE; pages and claims of 50. TestPlans
fails on a full scan, a sort, another index or fewer of its columns than below,
and on reading more rows than the answer needs. "rows" is the optimizer's
estimate; "read" the rows ANALYZE counted (reads only: writes are explained, not
run).

`

func writePlan(doc *strings.Builder, p plan, query string, accesses []access) {
	fmt.Fprintf(doc, "## %s\n\n```sql\n%s\n```\n\n| table | access | key | key_len | columns used | rows | read | extra |\n|---|---|---|---|---|---|---|---|\n",
		p.name, strings.Join(strings.Fields(query), " "))
	for _, a := range accesses {
		read := "-"
		if p.maxRows > 0 {
			read = fmt.Sprintf("%.0f", a.readRows)
		}
		fmt.Fprintf(doc, "| %s | %s | %s | %s | %s | %.0f | %s | %s |\n", a.table, a.typ, a.key, a.keyLen,
			strings.Join(a.parts, ", "), a.rows, read, strings.Join(a.extra, "; "))
	}
	doc.WriteString("\n")
}
