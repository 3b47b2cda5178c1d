package mysql

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"

	"github.com/genropy/postino/backends"
)

// maxChunk is the largest piece of a message (or of a receipt) one row
// holds.
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

// chunked is bytes to insert cut in chunks: each a row of key's values,
// then the chunk's number from 0, then the chunk.
type chunked struct {
	key  []any
	data []byte
}

// insertChunks inserts the chunks of each of all, whose keys have as many
// values, into table (its columns named in the order of chunked's rows),
// with as few statements as the packet size allows: one for a whole group
// of ordinary messages.
func (s *Store) insertChunks(ctx context.Context, tx *txn, table string, all []chunked) error {
	if len(all) == 0 {
		return nil
	}
	size, cols := s.chunkSize(), len(all[0].key)+2
	var args []any
	n, bytesIn := 0, 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES "+rowsOf(cols, n), args...)
		args, n, bytesIn = args[:0], 0, 0
		return err
	}
	for _, c := range all {
		for seq, off := 0, 0; off < len(c.data) || seq == 0; seq++ {
			end := min(off+size, len(c.data))
			if n > 0 && bytesIn+end-off > s.bodyBudget {
				if err := flush(); err != nil {
					return err
				}
			}
			args = append(append(args, c.key...), seq, c.data[off:end])
			n++
			bytesIn += end - off
			off = end
		}
	}
	return flush()
}

// insertBodies writes the bytes of the messages created, cut in chunks.
func (s *Store) insertBodies(ctx context.Context, tx *txn, msgs []*backends.Message) error {
	all := make([]chunked, len(msgs))
	for i, m := range msgs {
		all[i] = chunked{key: []any{m.ID}, data: m.Body}
	}
	return s.insertChunks(ctx, tx, "email_bodies (email_id, seq, data)", all)
}

// readChunks joins the chunks query returns, in order; none is
// backends.ErrNotFound.
func (s *Store) readChunks(ctx context.Context, query string, args ...any) (io.ReadCloser, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var buf bytes.Buffer
	found := false
	for rows.Next() {
		var chunk sql.RawBytes
		if err := rows.Scan(&chunk); err != nil {
			return nil, err
		}
		buf.Write(chunk)
		found = true
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, backends.ErrNotFound
	}
	return io.NopCloser(&buf), nil
}

// OpenBody reads the bytes the store keeps for message id.
func (s *Store) OpenBody(ctx context.Context, id string) (io.ReadCloser, error) {
	r, err := s.readChunks(ctx, "SELECT data FROM email_bodies WHERE email_id = ? ORDER BY seq", id)
	if err != nil {
		return nil, fmt.Errorf("the body of %s: %w", id, err)
	}
	return r, nil
}
