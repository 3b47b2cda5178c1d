package backendtest

import (
	"context"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/genropy/postino/backends"
)

// BodyMessage is a message whose bytes, body, the store keeps itself, under
// nonce, as intake makes one with spool.store outbox.
func BodyMessage(id, nonce string, body []byte) *backends.Message {
	return &backends.Message{ID: id, MessageID: id + "@example.com", Priority: backends.PriorityNormal,
		EmlPath: backends.BodyRef(id, nonce), Body: body,
		Envelope: backends.Envelope{Sender: "a@example.com", Recipients: []string{"b@example.com"}, Size: int64(len(body))}}
}

// BodyStore is a store that keeps messages' bytes.
type BodyStore interface {
	OpenBody(ctx context.Context, id string) (io.ReadCloser, error)
}

// ReadBody reads the bytes s keeps for message id, or fails t.
func ReadBody(t testing.TB, s BodyStore, id string) []byte {
	t.Helper()
	r, err := s.OpenBody(context.Background(), id)
	return readAll(t, r, err, "the body of "+id)
}

// readAll reads r, opened with err, whole, or fails t naming what it is.
func readAll(t testing.TB, r io.ReadCloser, err error, what string) []byte {
	t.Helper()
	if err != nil {
		t.Fatalf("open %s: %v", what, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", what, err)
	}
	return b
}

// RandomBytes makes n random bytes: every octet, quotes and backslashes
// included.
func RandomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.IntN(256))
	}
	return b
}
