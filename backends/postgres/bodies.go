package postgres

import (
	"context"
	"io"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// defaultBodyBudget bounds the message bytes one statement carries, so
// that a group of large messages goes in several statements rather than
// one held whole in the server's memory.
const defaultBodyBudget = 16 << 20

// chunkSize is the size of the pieces a message is cut into.
func (s *Store) chunkSize() int { return min(sqlstore.MaxChunk, s.bodyBudget) }

// chunked is bytes to insert cut in chunks: its key names them (a
// message's id, and a receipt's name).
type chunked = sqlstore.Chunked[[]string]

// insertChunks inserts the chunks of each of all with insert, whose
// arguments are one text[] per key value, then extra, then the chunks'
// numbers from 0 and the chunks; with as few statements as the budget
// allows, one for a whole group of ordinary messages.
func (s *Store) insertChunks(ctx context.Context, tx pgx.Tx, insert string, all []chunked, extra ...any) error {
	if len(all) == 0 {
		return nil
	}
	keys := make([][]string, len(all[0].Key))
	var seqs []int32
	var data [][]byte
	return sqlstore.InsertChunks(all, s.chunkSize(), s.bodyBudget, func(key []string, seq int, chunk []byte) {
		for i, v := range key {
			keys[i] = append(keys[i], v)
		}
		seqs, data = append(seqs, int32(seq)), append(data, chunk)
	}, func(int) error {
		args := make([]any, 0, len(keys)+len(extra)+2)
		for _, k := range keys {
			args = append(args, k)
		}
		args = append(append(args, extra...), seqs, data)
		_, err := tx.Exec(ctx, insert, args...)
		clear(keys)
		seqs, data = nil, nil
		return err
	})
}

// insertBodies writes the bytes of the messages created, cut in chunks.
func (s *Store) insertBodies(ctx context.Context, tx pgx.Tx, msgs []*backends.Message) error {
	all := make([]chunked, len(msgs))
	for i, m := range msgs {
		all[i] = chunked{Key: []string{m.ID}, Data: m.Body}
	}
	return s.insertChunks(ctx, tx, `INSERT INTO email_bodies (email_id, seq, data)
		SELECT * FROM unnest($1::text[], $2::int[], $3::bytea[])`, all)
}

// OpenBody reads the bytes the store keeps for message id.
func (s *Store) OpenBody(ctx context.Context, id string) (io.ReadCloser, error) {
	return s.sql.OpenBody(ctx, id, stmt{Query: "SELECT data FROM email_bodies WHERE email_id = $1 ORDER BY seq", Args: []any{id}})
}
