package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/genropy/postino/backends"
)

// SaveReceipt keeps raw as receipt name of message id (spool.store
// outbox), its chunks in one transaction; the first copy of a name stays.
func (s *Store) SaveReceipt(ctx context.Context, id, name string, raw []byte) error {
	if err := backends.CheckReceiptName(name); err != nil {
		return err
	}
	receipt := chunked{key: []any{id, name, len(raw), time.Now().UTC()}, data: raw}
	err := s.tx(ctx, func(tx *txn) error {
		return s.insertChunks(ctx, tx, "email_receipts (email_id, name, size, saved_at, seq, data)", []chunked{receipt})
	})
	var me *mysql.MySQLError
	switch {
	case errors.As(err, &me) && me.Number == 1062:
		return nil // saved before: by another relay, or read twice
	case errors.As(err, &me) && me.Number == 1452: // the message is not there (foreign key)
		return fmt.Errorf("receipt %s of %s: %w", name, id, backends.ErrNotFound)
	case err != nil:
		return fmt.Errorf("receipt %s of %s: %w", name, id, err)
	}
	return nil
}

// Receipts lists the receipts of message id by name, from their first
// chunks' sizes and times.
func (s *Store) Receipts(ctx context.Context, id string) ([]backends.Receipt, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT r.name, r.size, r.saved_at FROM emails e
		LEFT JOIN email_receipts r ON r.email_id = e.id AND r.seq = 0 WHERE e.id = ? ORDER BY r.name`, id)
	if err != nil {
		return nil, fmt.Errorf("the receipts of %s: %w", id, err)
	}
	defer rows.Close()
	found := false
	var out []backends.Receipt
	for rows.Next() {
		var (
			name  sql.NullString
			size  sql.NullInt64
			saved sql.NullTime
		)
		if err := rows.Scan(&name, &size, &saved); err != nil {
			return nil, fmt.Errorf("the receipts of %s: %w", id, err)
		}
		found = true
		if name.Valid {
			out = append(out, backends.Receipt{Name: name.String, Size: size.Int64, SavedAt: saved.Time})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("the receipts of %s: %w", id, err)
	}
	if !found {
		return nil, fmt.Errorf("the receipts of %s: %w", id, backends.ErrNotFound)
	}
	return out, nil
}

// OpenReceipt reads receipt name of message id.
func (s *Store) OpenReceipt(ctx context.Context, id, name string) (io.ReadCloser, error) {
	if err := backends.CheckReceiptName(name); err != nil {
		return nil, err
	}
	r, err := s.readChunks(ctx, "SELECT data FROM email_receipts WHERE email_id = ? AND name = ? ORDER BY seq", id, name)
	if err != nil {
		return nil, fmt.Errorf("receipt %s of %s: %w", name, id, err)
	}
	return r, nil
}
