package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
	"github.com/genropy/postino/internal/groupcommit"
)

// op is one write of the group commit (sqlstore.Write), and what the
// store keeps beside it.
type op struct {
	sqlstore.Write
	cands []string // the claim's first pick, ids in claim order
}

// commitConfig shapes the writer's groups: under load a group waits for
// more as long as the previous commit took, 10 ms at most (one commit, one
// log flush and one history insert for a whole group of sessions; paced,
// since each commit costs the server, whose CPU a loaded machine or a fleet
// of relays makes dear: with a fixed millisecond, two relays on one
// MariaDB made twice the commits a message of one relay and were slower
// than it), and holds at most 256 writes so that its statements stay
// within max_allowed_packet.
var commitConfig = groupcommit.Config{Max: 256, Window: 10 * time.Millisecond, Paced: true}

// commit runs a group in one transaction (sqlstore.CommitGroup).
func (s *Store) commit(group []*op) []error {
	ctx := context.Background()
	return sqlstore.CommitGroup(group, func(g []*op) error {
		return s.tx(ctx, func(tx *txn) error { return s.apply(ctx, tx, g) })
	})
}

// apply writes a group inside tx (sqlstore.ApplyGroup), with a few
// statements whatever its size (txRows).
func (s *Store) apply(ctx context.Context, tx *txn, group []*op) error {
	w := newTxRows(ctx, tx)
	insert := func(creates []*op) error { return s.insertMessages(ctx, tx, creates, &w.Changes) }
	if err := sqlstore.ApplyGroup(w, group, insert, w.lockClaims); err != nil {
		return err
	}
	// Creates deferred to a query that did not come: their outcome must
	// be known before the writes.
	if err := tx.Flush(ctx); err != nil {
		return err
	}
	return w.Write()
}

// insertMessages creates messages with one statement, and their bodies
// when the store keeps them. An id already taken keeps its row (ON
// DUPLICATE KEY changes nothing); reading the spool paths back tells which
// rows are ours, since each submission has its own file or BodyRef.
//
// Creates that need no more statements (no bytes kept, no batch to check)
// go with the transaction's next query (txn.Defer), the lock of the moved
// messages in a group under load, and read their paths back there: one
// round trip fewer for each group.
func (s *Store) insertMessages(ctx context.Context, tx *txn, creates []*op, h *backends.Changes) error {
	if len(creates) == 0 {
		return nil
	}
	insert, ids, err := insertStmt(creates)
	if err != nil {
		return err
	}
	if plain(creates) {
		tx.Defer(insert, nil)
		tx.Defer(pathsStmt(ids), func(rows *sql.Rows) error {
			paths, err := scanPaths(rows)
			if err == nil {
				madeBy(creates, paths, h)
			}
			return err
		})
		return nil
	}
	res, err := tx.ExecContext(ctx, insert.Query, insert.Args...)
	if err != nil {
		return err
	}
	paths, err := insertedPaths(ctx, tx, res, creates, ids)
	if err != nil {
		return err
	}
	bodies, batched := madeBy(creates, paths, h)
	// The bytes commit with their row, or not at all: only the rows this
	// group made get them.
	if err := s.insertBodies(ctx, tx, bodies); err != nil {
		return err
	}
	return holdSuspended(ctx, tx, batched)
}

// plain reports whether the creates need no statement beyond their
// insert: no bytes to keep, no batch to check.
func plain(creates []*op) bool {
	for _, o := range creates {
		if o.Create.Body != nil || o.Create.Batch != "" {
			return false
		}
	}
	return true
}

// insertStmt inserts the creates' rows, leaving a row whose id is taken as
// it is, and returns their ids.
func insertStmt(creates []*op) (stmt, []any, error) {
	args := make([]any, 0, 16*len(creates))
	ids := make([]any, 0, len(creates))
	for _, o := range creates {
		m := o.Create
		env, err := json.Marshal(m.Envelope)
		if err != nil {
			return stmt{}, nil, err
		}
		args = append(args, m.ID, m.Status, null(m.EmlPath), null(m.PayloadPath), null(m.Reason), 1, m.CreatedAt.UTC(), m.UpdatedAt.UTC(),
			null(m.MessageID), m.Priority, null(m.Batch), m.DueAt.UTC(), m.QueueTime().UTC(), 0, null(m.Route), env)
		ids = append(ids, m.ID)
	}
	return stmt{Query: `INSERT INTO emails (id, status, eml_file_path, payload_file_path, reason, version,
		created_at, updated_at, message_id, priority, batch_code, due_at, queue_at, attempts, route, envelope) VALUES ` +
		rowsOf(16, len(creates)) + " ON DUPLICATE KEY UPDATE id = id", Args: args}, ids, nil
}

// madeBy records the history and counts of the rows the creates made,
// whose paths are theirs, and marks the others duplicates. It returns
// those of the rows made whose bytes the store keeps, and their ids by
// batch.
func madeBy(creates []*op, paths map[string]string, h *backends.Changes) ([]*backends.Message, map[string][]any) {
	mine := map[string]bool{}
	batched := map[string][]any{}
	var bodies []*backends.Message
	for _, o := range creates {
		m := o.Create
		// Two creates of one id in one group: the first is the row.
		if paths[m.ID] != m.EmlPath || mine[m.ID] {
			o.Err = backends.ErrDuplicate
			continue
		}
		mine[m.ID] = true
		if m.Body != nil {
			bodies = append(bodies, m)
		}
		h.Created(m)
		if m.Batch != "" {
			batched[m.Batch] = append(batched[m.Batch], m.ID)
		}
	}
	return bodies, batched
}

// insertedPaths returns the spool path of each row the creates' ids hold.
// When the insert added a row for every create, which it counts as one
// affected row each where a duplicate counts none (the connection does not
// ask for found rows: Connect), those are the creates' own, and nothing
// is read.
func insertedPaths(ctx context.Context, tx *txn, res sql.Result, creates []*op, ids []any) (map[string]string, error) {
	if n, err := res.RowsAffected(); err == nil && n == int64(len(creates)) {
		paths := make(map[string]string, len(creates))
		for _, o := range creates {
			paths[o.Create.ID] = o.Create.EmlPath
		}
		return paths, nil
	}
	read := pathsStmt(ids)
	rows, err := tx.QueryContext(ctx, read.Query, read.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return scanPaths(rows)
}

// pathsStmt reads the spool path of the rows of ids.
func pathsStmt(ids []any) stmt {
	return stmt{Query: "SELECT id, eml_file_path FROM emails WHERE id IN (" + inList(len(ids)) + ")", Args: ids}
}

// scanPaths reads the result of pathsStmt, leaving rows open for what
// follows it.
func scanPaths(rows *sql.Rows) (map[string]string, error) {
	paths := map[string]string{}
	for rows.Next() {
		var id string
		var path sql.NullString
		if err := rows.Scan(&id, &path); err != nil {
			return nil, err
		}
		paths[strings.TrimRight(id, " ")] = path.String
	}
	return paths, rows.Err()
}

// holdSuspended sets held on the new messages (by batch) whose batch is
// suspended. It reads the batches after inserting the rows, under a shared
// lock: a suspension committed first is seen here; one that commits later
// waits for these rows' locks and then holds them itself (SuspendBatch).
func holdSuspended(ctx context.Context, tx *txn, batched map[string][]any) error {
	if len(batched) == 0 {
		return nil
	}
	codes := make([]any, 0, len(batched))
	for code := range batched {
		codes = append(codes, code)
	}
	held, err := queryIDs(ctx, tx, stmt{Query: "SELECT code FROM email_batches WHERE code IN (" + inList(len(codes)) + ") LOCK IN SHARE MODE", Args: codes})
	if err != nil || len(held) == 0 {
		return err
	}
	var ids []any
	for _, code := range held {
		ids = append(ids, batched[code]...)
	}
	_, err = tx.ExecContext(ctx, "UPDATE emails SET held = 1 WHERE id IN ("+inList(len(ids))+")", ids...)
	return err
}
