package spool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/genropy/postino/backends"
)

// Store is an outbox that keeps the bytes of messages itself
// (spool.store outbox).
type Store interface {
	OpenBody(ctx context.Context, id string) (io.ReadCloser, error)
}

// errNoStore is a relay's answer for bytes kept in an outbox it does not
// use.
var errNoStore = errors.New("this relay's outbox keeps no message bytes: set outbox.backend to the store the fleet shares")

// readTimeout bounds the read of one message's bytes from the store.
const readTimeout = time.Minute

// Bodies opens a message's bytes where its path says: in the
// outbox store for a backends.BodyRef, in the spool directory otherwise.
// Following the path, not the relay's setting, lets a fleet mix both while
// it moves from a shared directory to the store.
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
	id, ok := backends.BodyID(path)
	if !ok {
		return b.files.Open(path)
	}
	err := errNoStore
	if b.store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
		defer cancel()
		var r io.ReadCloser
		if r, err = b.store.OpenBody(ctx, id); err == nil {
			return r, nil
		}
	}
	b.files.failed(path, err)
	return nil, fmt.Errorf("spool: the bytes of %s cannot be read from the outbox: %w", id, err)
}
