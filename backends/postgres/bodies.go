package postgres

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends"
)

// maxChunk is the largest piece of a message (or of a receipt) one row
// holds: a row is read whole, and a chunk bounds that.
const maxChunk = 1 << 20

// defaultBodyBudget bounds the message bytes one statement carries, so
// that a group of large messages goes in several statements rather than
// one held whole in the server's memory.
const defaultBodyBudget = 16 << 20

// chunkSize is the size of the pieces a message is cut into.
func (s *Store) chunkSize() int { return min(maxChunk, s.bodyBudget) }

// chunked is bytes to insert cut in chunks: key names them (a message's
// id, and a receipt's name), data is the bytes.
type chunked struct {
	key  []string
	data []byte
}

// insertChunks inserts the chunks of each of all with insert, whose
// arguments are one text[] per key value, then extra, then the chunks'
// numbers from 0 and the chunks; with as few statements as the budget
// allows, one for a whole group of ordinary messages.
func (s *Store) insertChunks(ctx context.Context, tx pgx.Tx, insert string, all []chunked, extra ...any) error {
	if len(all) == 0 {
		return nil
	}
	size := s.chunkSize()
	keys := make([][]string, len(all[0].key))
	var seqs []int32
	var data [][]byte
	bytesIn := 0
	flush := func() error {
		if len(data) == 0 {
			return nil
		}
		args := make([]any, 0, len(keys)+len(extra)+2)
		for _, k := range keys {
			args = append(args, k)
		}
		args = append(append(args, extra...), seqs, data)
		_, err := tx.Exec(ctx, insert, args...)
		clear(keys)
		seqs, data, bytesIn = nil, nil, 0
		return err
	}
	for _, c := range all {
		for seq, off := 0, 0; off < len(c.data) || seq == 0; seq++ {
			end := min(off+size, len(c.data))
			if len(data) > 0 && bytesIn+end-off > s.bodyBudget {
				if err := flush(); err != nil {
					return err
				}
			}
			for i, v := range c.key {
				keys[i] = append(keys[i], v)
			}
			seqs, data = append(seqs, int32(seq)), append(data, c.data[off:end])
			bytesIn += end - off
			off = end
		}
	}
	return flush()
}

// insertBodies writes the bytes of the messages created, cut in chunks.
func (s *Store) insertBodies(ctx context.Context, tx pgx.Tx, msgs []*backends.Message) error {
	all := make([]chunked, len(msgs))
	for i, m := range msgs {
		all[i] = chunked{key: []string{m.ID}, data: m.Body}
	}
	return s.insertChunks(ctx, tx, `INSERT INTO email_bodies (email_id, seq, data)
		SELECT * FROM unnest($1::text[], $2::int[], $3::bytea[])`, all)
}

// readChunks joins the chunks query returns, in order; none is
// backends.ErrNotFound.
func (s *Store) readChunks(ctx context.Context, query string, args ...any) (io.ReadCloser, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var buf bytes.Buffer
	found := false
	for rows.Next() {
		var chunk []byte
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
	r, err := s.readChunks(ctx, "SELECT data FROM email_bodies WHERE email_id = $1 ORDER BY seq", id)
	if err != nil {
		return nil, fmt.Errorf("the body of %s: %w", id, err)
	}
	return r, nil
}
