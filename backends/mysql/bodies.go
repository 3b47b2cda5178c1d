package mysql

import (
	"context"
	"io"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// bodyBudgetOf is how many message bytes one statement may carry on a
// server whose max_allowed_packet is packet: a quarter of it, since the
// driver writes the bytes escaped into the statement's text (a byte may
// take two) and the rest of the statement needs room too.
func bodyBudgetOf(packet int) int {
	return max(packet/4, 64<<10)
}

// chunkSize is the size of the pieces a message is cut into.
func (s *Store) chunkSize() int { return min(sqlstore.MaxChunk, s.bodyBudget) }

// chunked is bytes to insert cut in chunks: each a row of its key's
// values, then the chunk's number from 0, then the chunk.
type chunked = sqlstore.Chunked[[]any]

// insertChunks inserts the chunks of each of all, whose keys have as many
// values, into table (its columns named in the order of chunked's rows),
// with as few statements as the packet size allows: one for a whole group
// of ordinary messages.
func (s *Store) insertChunks(ctx context.Context, tx *txn, table string, all []chunked) error {
	var args []any
	return sqlstore.InsertChunks(all, s.chunkSize(), s.bodyBudget, func(key []any, seq int, chunk []byte) {
		args = append(append(args, key...), seq, chunk)
	}, func(n int) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO "+table+" VALUES "+rowsOf(len(all[0].Key)+2, n), args...)
		args = args[:0]
		return err
	})
}

// insertBodies writes the bytes of the messages created, cut in chunks.
func (s *Store) insertBodies(ctx context.Context, tx *txn, msgs []*backends.Message) error {
	all := make([]chunked, len(msgs))
	for i, m := range msgs {
		all[i] = chunked{Key: []any{m.ID}, Data: m.Body}
	}
	return s.insertChunks(ctx, tx, "email_bodies (email_id, seq, data)", all)
}

// OpenBody reads the bytes the store keeps for message id.
func (s *Store) OpenBody(ctx context.Context, id string) (io.ReadCloser, error) {
	return s.sql.OpenBody(ctx, id, stmt{Query: "SELECT data FROM email_bodies WHERE email_id = ? ORDER BY seq", Args: []any{id}})
}
