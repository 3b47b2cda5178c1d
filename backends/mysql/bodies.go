package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"

	"github.com/genropy/postino/backends"
)

// maxChunk is the largest piece of a message one email_bodies row holds.
const maxChunk = 1 << 20

// bodyBudgetOf is how many message bytes one statement may carry on a
// server whose max_allowed_packet is packet: a quarter of it, since the
// driver writes the bytes escaped into the statement's text (a byte may
// take two) and the rest of the statement needs room too.
func bodyBudgetOf(packet int) int {
	return max(packet/4, 64<<10)
}

// chunkSize is the size of the pieces a message is cut into.
func (s *Store) chunkSize() int { return min(maxChunk, s.bodyBudget) }

// insertBodies writes the bytes of the messages created, cut in chunks,
// with as few statements as the packet size allows: one for a whole
// group of ordinary messages.
func (s *Store) insertBodies(ctx context.Context, tx *sql.Tx, msgs []*backends.Message) error {
	size := s.chunkSize()
	var args []any
	n, bytesIn := 0, 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO email_bodies (email_id, seq, data) VALUES "+rowsOf(3, n), args...)
		args, n, bytesIn = args[:0], 0, 0
		return err
	}
	for _, m := range msgs {
		for seq, off := 0, 0; off < len(m.Body) || seq == 0; seq++ {
			end := min(off+size, len(m.Body))
			if n > 0 && bytesIn+end-off > s.bodyBudget {
				if err := flush(); err != nil {
					return err
				}
			}
			args = append(args, m.ID, seq, m.Body[off:end])
			n++
			bytesIn += end - off
			off = end
		}
	}
	return flush()
}

// OpenBody reads the bytes the store keeps for message id.
func (s *Store) OpenBody(ctx context.Context, id string) (io.ReadCloser, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT data FROM email_bodies WHERE email_id = ? ORDER BY seq", id)
	if err != nil {
		return nil, fmt.Errorf("read the body of %s: %w", id, err)
	}
	defer rows.Close()
	var buf bytes.Buffer
	found := false
	for rows.Next() {
		var chunk sql.RawBytes
		if err := rows.Scan(&chunk); err != nil {
			return nil, fmt.Errorf("read the body of %s: %w", id, err)
		}
		buf.Write(chunk)
		found = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the body of %s: %w", id, err)
	}
	if !found {
		return nil, fmt.Errorf("the body of %s: %w", id, backends.ErrNotFound)
	}
	return io.NopCloser(&buf), nil
}
