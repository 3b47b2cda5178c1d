package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/genropy/postino/backends"
)

// Store is an outbox that keeps the bytes of messages itself, and the
// receipts of those messages (spool.store outbox).
type Store interface {
	OpenBody(ctx context.Context, id string) (io.ReadCloser, error)
	// SaveReceipt keeps raw as receipt name of message id; the first copy
	// of a name stays. ErrNotFound when the message is not there.
	SaveReceipt(ctx context.Context, id, name string, raw []byte) error
	// Receipts lists the receipts of message id by name; ErrNotFound when
	// the message is not there.
	Receipts(ctx context.Context, id string) ([]backends.Receipt, error)
	OpenReceipt(ctx context.Context, id, name string) (io.ReadCloser, error)
}

// errNoStore is a relay's answer for bytes kept in an outbox it does not
// use.
var errNoStore = errors.New("this relay's outbox keeps no message bytes: set outbox.backend to the store the fleet shares")

// readTimeout bounds the read of one message's bytes from the store.
const readTimeout = time.Minute

// Bodies opens a message's bytes, and keeps its receipts, where its path
// says: in the outbox store for a backends.BodyRef, so that any relay of
// the fleet reads them and none needs a disk that outlives it; in the
// spool directory otherwise. Following the path, not the relay's setting,
// lets a fleet mix both while it moves from a shared directory to the
// store.
type Bodies struct {
	files *Spool
	store Store // nil when the outbox keeps no bytes
}

// NewBodies reads files from the spool and BodyRefs from store, which may
// be nil when the outbox keeps no bytes.
func NewBodies(files *Spool, store Store) *Bodies {
	return &Bodies{files: files, store: store}
}

// Open opens the bytes of the message at path. Those that cannot be read
// are counted with the spool's (Unreadable): the message waits, since a
// store's hiccup looks the same as bytes gone for good.
func (b *Bodies) Open(path string) (io.ReadCloser, error) {
	id, inStore, err := b.where(path, "bytes")
	if err == nil && !inStore {
		return b.files.Open(path)
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		defer cancel()
		var r io.ReadCloser
		if r, err = b.store.OpenBody(ctx, id); err == nil {
			return r, nil
		}
		err = fmt.Errorf("spool: the bytes of %s cannot be read from the outbox: %w", id, err)
	}
	b.files.failed(path, err)
	return nil, err
}

// where says whether the message at path keeps its bytes and receipts (what)
// in the store, and its id there; an error when they are in an outbox this
// relay does not use.
func (b *Bodies) where(path, what string) (id string, inStore bool, err error) {
	id, inStore = backends.BodyID(path)
	if inStore && b.store == nil {
		return id, true, fmt.Errorf("spool: the %s of %s are in the outbox: %w", what, id, errNoStore)
	}
	return id, inStore, nil
}
