package postgres

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends"
)

// SaveReceipt keeps raw as receipt name of message id (spool.store
// outbox), its chunks in one transaction; the first copy of a name stays.
func (s *Store) SaveReceipt(ctx context.Context, id, name string, raw []byte) error {
	if err := backends.CheckReceiptName(name); err != nil {
		return err
	}
	receipt := chunked{key: []string{id, name}, data: raw}
	err := s.tx(ctx, func(tx pgx.Tx) error {
		return s.insertChunks(ctx, tx, `INSERT INTO email_receipts (email_id, name, size, saved_at, seq, data)
			SELECT email_id, name, $3, $4, seq, data FROM unnest($1::text[], $2::text[], $5::int[], $6::bytea[]) AS r(email_id, name, seq, data)`,
			[]chunked{receipt}, int64(len(raw)), ts(time.Now()))
	})
	switch pgCode(err) {
	case codeUniqueViolation:
		return nil // saved before: by another relay, or read twice
	case codeForeignKeyViolation: // the message is not there
		return fmt.Errorf("receipt %s of %s: %w", name, id, backends.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("receipt %s of %s: %w", name, id, err)
	}
	return nil
}

// Receipts lists the receipts of message id by name, from their first
// chunks' sizes and times.
func (s *Store) Receipts(ctx context.Context, id string) ([]backends.Receipt, error) {
	rows, err := s.pool.Query(ctx, `SELECT r.name, r.size, r.saved_at FROM emails e
		LEFT JOIN email_receipts r ON r.email_id = e.id AND r.seq = 0 WHERE e.id = $1 ORDER BY r.name`, id)
	if err != nil {
		return nil, fmt.Errorf("the receipts of %s: %w", id, err)
	}
	defer rows.Close()
	found := false
	var out []backends.Receipt
	for rows.Next() {
		var (
			name  *string
			size  *int64
			saved *time.Time
		)
		if err := rows.Scan(&name, &size, &saved); err != nil {
			return nil, fmt.Errorf("the receipts of %s: %w", id, err)
		}
		found = true
		if name != nil {
			out = append(out, backends.Receipt{Name: *name, Size: *size, SavedAt: *saved})
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
	r, err := s.readChunks(ctx, "SELECT data FROM email_receipts WHERE email_id = $1 AND name = $2 ORDER BY seq", id, name)
	if err != nil {
		return nil, fmt.Errorf("receipt %s of %s: %w", name, id, err)
	}
	return r, nil
}
