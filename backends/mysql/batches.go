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

func (s *Store) SuspendBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	_, err := s.db.ExecContext(ctx, "INSERT IGNORE INTO email_batches (code, suspended_at) VALUES (?, ?)", code, time.Now().UTC())
	return err
}

func (s *Store) ActivateBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	_, err := s.db.ExecContext(ctx, "DELETE FROM email_batches WHERE code = ?", code)
	return err
}
