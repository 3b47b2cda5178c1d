package sqlstore

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/genropy/postino/backends"
)

// MaxChunk is the largest piece of a message (or of a receipt) one row
// holds: a row is read whole, and a chunk bounds that.
const MaxChunk = 1 << 20

// Chunked is bytes to insert cut in chunks, each a row of Key's values,
// then the chunk's number from 0, then the chunk.
type Chunked[K any] struct {
	Key  K
	Data []byte
}

// InsertChunks cuts the bytes of each of all in chunks of size, and
// hands each to add, with its key and number; flush, given how many
// chunks add took since the last flush, inserts them, once they hold
// budget bytes and at the end: as few statements as the budget allows,
// one for a whole group of ordinary messages. An empty message is one
// empty chunk.
func InsertChunks[K any](all []Chunked[K], size, budget int, add func(key K, seq int, chunk []byte), flush func(n int) error) error {
	n, bytesIn := 0, 0
	for _, c := range all {
		for seq, off := 0, 0; off < len(c.Data) || seq == 0; seq++ {
			end := min(off+size, len(c.Data))
			if n > 0 && bytesIn+end-off > budget {
				if err := flush(n); err != nil {
					return err
				}
				n, bytesIn = 0, 0
			}
			add(c.Key, seq, c.Data[off:end])
			n++
			bytesIn += end - off
			off = end
		}
	}
	if n == 0 {
		return nil
	}
	return flush(n)
}

// readChunks joins the chunks st selects, in order; none is
// backends.ErrNotFound.
func (s Store) readChunks(ctx context.Context, st Stmt) (io.ReadCloser, error) {
	rows, err := s.DB.Query(ctx, st.Query, st.Args...)
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

// OpenBody reads the bytes of message id, the chunks st selects.
func (s Store) OpenBody(ctx context.Context, id string, st Stmt) (io.ReadCloser, error) {
	r, err := s.readChunks(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("the body of %s: %w", id, err)
	}
	return r, nil
}

// SaveReceipt keeps a receipt (spool.store outbox): insert writes its
// chunks in one transaction; the first copy of a name stays.
func (s Store) SaveReceipt(id, name string, insert func() error) error {
	if err := backends.CheckReceiptName(name); err != nil {
		return err
	}
	err := insert()
	switch s.Fault(err) {
	case KeyTaken:
		return nil // saved before: by another relay, or read twice
	case NoParent: // the message is not there
		return fmt.Errorf("receipt %s of %s: %w", name, id, backends.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("receipt %s of %s: %w", name, id, err)
	}
	return nil
}

// Receipts lists the receipts of message id that st selects, rows of a
// name, a size and a time, each NULL when the message has none.
func (s Store) Receipts(ctx context.Context, id string, st Stmt) ([]backends.Receipt, error) {
	rows, err := s.DB.Query(ctx, st.Query, st.Args...)
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

// OpenReceipt reads receipt name of message id, the chunks st selects.
func (s Store) OpenReceipt(ctx context.Context, id, name string, st Stmt) (io.ReadCloser, error) {
	if err := backends.CheckReceiptName(name); err != nil {
		return nil, err
	}
	r, err := s.readChunks(ctx, st)
	if err != nil {
		return nil, fmt.Errorf("receipt %s of %s: %w", name, id, err)
	}
	return r, nil
}
