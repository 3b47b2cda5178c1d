package mysql

import (
	"context"
	"io"
	"time"

	"github.com/genropy/postino/backends"
)

// SaveReceipt keeps raw as receipt name of message id (spool.store
// outbox), its chunks in one transaction; the first copy of a name stays.
func (s *Store) SaveReceipt(ctx context.Context, id, name string, raw []byte) error {
	return s.sql.SaveReceipt(id, name, func() error {
		receipt := chunked{Key: []any{id, name, len(raw), time.Now().UTC()}, Data: raw}
		return s.tx(ctx, func(tx *txn) error {
			return s.insertChunks(ctx, tx, "email_receipts (email_id, name, size, saved_at, seq, data)", []chunked{receipt})
		})
	})
}

// Receipts lists the receipts of message id by name, from their first
// chunks' sizes and times.
func (s *Store) Receipts(ctx context.Context, id string) ([]backends.Receipt, error) {
	return s.sql.Receipts(ctx, id, stmt{Query: `SELECT r.name, r.size, r.saved_at FROM emails e
		LEFT JOIN email_receipts r ON r.email_id = e.id AND r.seq = 0 WHERE e.id = ? ORDER BY r.name`, Args: []any{id}})
}

// OpenReceipt reads receipt name of message id.
func (s *Store) OpenReceipt(ctx context.Context, id, name string) (io.ReadCloser, error) {
	return s.sql.OpenReceipt(ctx, id, name, stmt{Query: "SELECT data FROM email_receipts WHERE email_id = ? AND name = ? ORDER BY seq", Args: []any{id, name}})
}
