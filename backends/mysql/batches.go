package mysql

import (
	"context"
	"time"

	"github.com/genropy/postino/backends"
)

func suspended(ctx context.Context, q querier) ([]string, error) {
	rows, err := q.QueryContext(ctx, "SELECT code FROM email_batches ORDER BY code")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

func (s *Store) SuspendedBatches(ctx context.Context) ([]string, error) { return suspended(ctx, s.db) }

// SuspendBatch records the batch and holds its messages, in one
// transaction, so that claims skip them by index (claim_held).
func (s *Store) SuspendBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	return s.tx(ctx, func(tx *txn) error {
		if _, err := tx.ExecContext(ctx, "INSERT IGNORE INTO email_batches (code, suspended_at) VALUES (?, ?)", code, time.Now().UTC()); err != nil {
			return err
		}
		hold := holdBatchStmt(code, true)
		_, err := tx.ExecContext(ctx, hold.Query, hold.Args...)
		return err
	})
}

func (s *Store) ActivateBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	return s.tx(ctx, func(tx *txn) error {
		if _, err := tx.ExecContext(ctx, "DELETE FROM email_batches WHERE code = ?", code); err != nil {
			return err
		}
		release := holdBatchStmt(code, false)
		_, err := tx.ExecContext(ctx, release.Query, release.Args...)
		return err
	})
}

// holdBatchStmt sets or clears held on the messages of a batch, read
// through idx_batch even when the batch is a good part of the outbox (the
// optimizer then scans the whole table).
func holdBatchStmt(code string, held bool) stmt {
	return stmt{Query: "UPDATE emails FORCE INDEX (idx_batch) SET held = ? WHERE batch_code = ? AND held <> ?", Args: []any{held, code, held}}
}
