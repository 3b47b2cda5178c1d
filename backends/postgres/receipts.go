package postgres

import (
	"context"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends"
)

// SaveReceipt keeps raw as receipt name of message id (spool.store
// outbox), its chunks in one transaction; the first copy of a name stays.
func (s *Store) SaveReceipt(ctx context.Context, id, name string, raw []byte) error {
	return s.sql.SaveReceipt(id, name, func() error {
		receipt := chunked{Key: []string{id, name}, Data: raw}
		return s.tx(ctx, func(tx pgx.Tx) error {
			return s.insertChunks(ctx, tx, `INSERT INTO email_receipts (email_id, name, size, saved_at, seq, data)
			SELECT email_id, name, $3, $4, seq, data FROM unnest($1::text[], $2::text[], $5::int[], $6::bytea[]) AS r(email_id, name, seq, data)`,
				[]chunked{receipt}, int64(len(raw)), ts(time.Now()))
		})
	})
}

// Receipts lists the receipts of message id by name, from their first
// chunks' sizes and times.
func (s *Store) Receipts(ctx context.Context, id string) ([]backends.Receipt, error) {
	return s.sql.Receipts(ctx, id, stmt{Query: `SELECT r.name, r.size, r.saved_at FROM emails e
		LEFT JOIN email_receipts r ON r.email_id = e.id AND r.seq = 0 WHERE e.id = $1 ORDER BY r.name`, Args: []any{id}})
}

// OpenReceipt reads receipt name of message id.
func (s *Store) OpenReceipt(ctx context.Context, id, name string) (io.ReadCloser, error) {
	return s.sql.OpenReceipt(ctx, id, name, stmt{Query: "SELECT data FROM email_receipts WHERE email_id = $1 AND name = $2 ORDER BY seq", Args: []any{id, name}})
}
