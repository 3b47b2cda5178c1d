package backends

import (
	"context"
	"fmt"
	"time"
)

// MaxDocument bounds a document's value: an MTA-STS policy is at most 64
// KiB (RFC 8461 section 3.3), and the relay keeps nothing larger.
const MaxDocument = 64 << 10

// Documents holds small documents by key, each until it expires, that the
// relays sharing a store share: what one relay fetched for all (an
// MTA-STS policy), and what each counts for a later sum (a TLS report's
// counts, under a key of each relay's, so that no row is written by two).
// A key names its user's documents by a prefix ("mta-sts/", "tlsrpt/").
type Documents interface {
	// PutDocument stores d under d.Key, replacing the document there,
	// until d.Expires; CheckDocument says what it takes. Past its expiry a
	// document is gone for GetDocument and ListDocuments, and the store
	// deletes it when it likes (on a later put, by TTL).
	PutDocument(ctx context.Context, d Document) error
	// GetDocument returns the document under key; ErrNotFound when there
	// is none, or it expired.
	GetDocument(ctx context.Context, key string) (Document, error)
	// ListDocuments returns the documents whose key starts with prefix and
	// that have not expired, in key order (byte by byte).
	ListDocuments(ctx context.Context, prefix string) ([]Document, error)
}

// Document is a value under a key, until it expires.
type Document struct {
	Key   string
	Value []byte
	// Expires is when the document is gone; the stores keep microseconds.
	Expires time.Time
}

// CheckDocument accepts a document to put: a key of 1 to 255 bytes, a
// value of at most MaxDocument, an expiry.
func CheckDocument(d Document) error {
	switch {
	case d.Key == "" || len(d.Key) > 255:
		return fmt.Errorf("document key %q: give 1 to 255 bytes", d.Key)
	case len(d.Value) > MaxDocument:
		return fmt.Errorf("document %s: %d bytes, over %d", d.Key, len(d.Value), MaxDocument)
	case d.Expires.IsZero():
		return fmt.Errorf("document %s: no expiry", d.Key)
	}
	return nil
}
