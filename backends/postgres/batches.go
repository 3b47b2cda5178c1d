package postgres

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends"
)

// batchLock is the class of the advisory locks that order a batch's
// suspension against the creation of its messages (see holdSuspended).
const batchLock = 0x706f7374 // "post"

func (s *Store) SuspendedBatches(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, "SELECT code FROM email_batches ORDER BY code")
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// SuspendBatch records the batch and holds its messages, in one
// transaction, so that claims skip them by index (claim_held).
func (s *Store) SuspendBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	return s.setBatch(ctx, code, true, "INSERT INTO email_batches (code, suspended_at) VALUES ($1, $2) ON CONFLICT (code) DO NOTHING",
		code, ts(time.Now()))
}

func (s *Store) ActivateBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	return s.setBatch(ctx, code, false, "DELETE FROM email_batches WHERE code = $1", code)
}

// setBatch changes the batch's row with change, then holds or releases its
// messages, under the batch's advisory lock: the update, a statement that
// starts once the lock is taken, sees every message whose creation took
// the lock before (holdSuspended).
func (s *Store) setBatch(ctx context.Context, code string, held bool, change string, args ...any) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", batchLock, code); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, change, args...); err != nil {
			return err
		}
		hold := holdBatchStmt(code, held)
		_, err := tx.Exec(ctx, hold.Query, hold.Args...)
		return err
	})
}

// holdBatchStmt sets or clears held on the messages of a batch (idx_batch).
func holdBatchStmt(code string, held bool) stmt {
	return stmt{Query: "UPDATE emails SET held = $2 WHERE batch_code = $1 AND held <> $2", Args: []any{code, held}}
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
