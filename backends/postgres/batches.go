package postgres

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// batchLock is the class of the advisory locks that order a batch's
// suspension against the creation of its messages (see holdSuspended).
const batchLock = 0x706f7374 // "post"

// batchStmts are PostgreSQL's statements of batches (sqlstore.Batches).
type batchStmts struct{}

var _ sqlstore.BatchStmts = batchStmts{}

func (batchStmts) Mark(n int) string { return "$" + strconv.Itoa(n) }

// Lock takes the batch's advisory lock: the update of its messages, a
// statement that starts once the lock is taken, sees every message whose
// creation took the lock before (holdSuspended).
func (batchStmts) Lock(code string) []stmt {
	return []stmt{{Query: "SELECT pg_advisory_xact_lock($1, hashtext($2))", Args: []any{batchLock, code}}}
}

func (batchStmts) Suspend(code string, at time.Time) stmt {
	return stmt{Query: "INSERT INTO email_batches (code, suspended_at) VALUES ($1, $2) ON CONFLICT (code) DO NOTHING", Args: []any{code, at}}
}

func (batchStmts) Hold(code string, held bool) stmt { return holdBatchStmt(code, held) }

// holdBatchStmt sets or clears held on the messages of a batch (idx_batch).
func holdBatchStmt(code string, held bool) stmt {
	return stmt{Query: "UPDATE emails SET held = $2 WHERE batch_code = $1 AND held <> $2", Args: []any{code, held}}
}

func (batchStmts) Tally(codes []string, tallies []backends.BatchTally) stmt {
	n := len(codes)
	messages, sent, hard, complaints := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, t := range tallies {
		messages[i], sent[i], hard[i], complaints[i] = t.Messages, t.Sent, t.Hard, t.Complaints
	}
	return stmt{Query: `INSERT INTO batch_tallies AS t (code, messages, sent, hard, complaints)
		SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[])
		ON CONFLICT (code) DO UPDATE SET messages = t.messages + EXCLUDED.messages, sent = t.sent + EXCLUDED.sent,
			hard = t.hard + EXCLUDED.hard, complaints = t.complaints + EXCLUDED.complaints`,
		Args: []any{codes, messages, sent, hard, complaints}}
}

func (batchStmts) Trip(code, reason string, at time.Time) stmt {
	return stmt{Query: `INSERT INTO batch_tallies (code, tripped, tripped_at) VALUES ($1, $2, $3)
		ON CONFLICT (code) DO UPDATE SET tripped = EXCLUDED.tripped, tripped_at = EXCLUDED.tripped_at`, Args: []any{code, reason, at}}
}

func (batchStmts) Counts(code string) stmt { return batchCountsStmt(code) }

// batchCountsStmt counts the batch's messages of each status (idx_batch).
func batchCountsStmt(code string) stmt {
	return stmt{Query: "SELECT status, COUNT(*) FROM emails WHERE batch_code = $1 GROUP BY status", Args: []any{code}}
}

// holdSuspended sets held on the new messages (by batch) whose batch is
// suspended. Their rows are inserted already, uncommitted; it takes the
// batches' advisory locks shared, then reads the batches: a suspension
// that took its lock first has committed, and is seen by this later
// statement; one that comes later waits for this transaction's commit, and
// its update then sees these rows.
func holdSuspended(ctx context.Context, tx pgx.Tx, batched map[string][]string) error {
	if len(batched) == 0 {
		return nil
	}
	codes := slices.Sorted(maps.Keys(batched)) // the locks' order
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock_shared($1, hashtext(c)) FROM unnest($2::text[]) WITH ORDINALITY AS b(c, n) ORDER BY n",
		batchLock, codes); err != nil {
		return err
	}
	rows, err := tx.Query(ctx, "SELECT code FROM email_batches WHERE code = ANY($1)", codes)
	if err != nil {
		return err
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(held) == 0 {
		return err
	}
	var ids []string
	for _, code := range held {
		ids = append(ids, batched[code]...)
	}
	_, err = tx.Exec(ctx, "UPDATE emails SET held = true WHERE id = ANY($1)", ids)
	return err
}
