package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
)

// Document buckets: one holds the documents by key, the other orders
// their keys by expiry, so that a put deletes the expired ones from its
// front without reading the rest.
var (
	bucketDocuments = []byte("documents") // key -> Document JSON
	bucketDocExpiry = []byte("docexpiry") // expiry time, key -> nil
)

// sweepDocuments bounds the expired documents one put deletes.
const sweepDocuments = 100

func getDocument(tx *bbolt.Tx, key string) (backends.Document, bool, error) {
	var d backends.Document
	v := tx.Bucket(bucketDocuments).Get([]byte(key))
	if v == nil {
		return d, false, nil
	}
	return d, true, json.Unmarshal(v, &d)
}

func (s *Store) PutDocument(ctx context.Context, d backends.Document) error {
	if err := backends.CheckDocument(d); err != nil {
		return err
	}
	d.Expires = d.Expires.UTC().Truncate(time.Microsecond)
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return s.db.Update(func(tx *bbolt.Tx) error {
		docs, expiry := tx.Bucket(bucketDocuments), tx.Bucket(bucketDocExpiry)
		old, found, err := getDocument(tx, d.Key)
		if err != nil {
			return err
		}
		if found {
			if err := expiry.Delete(timeIDKey(old.Expires, old.Key)); err != nil {
				return err
			}
		}
		if err := docs.Put([]byte(d.Key), b); err != nil {
			return err
		}
		if err := expiry.Put(timeIDKey(d.Expires, d.Key), nil); err != nil {
			return err
		}
		return sweepExpired(docs, expiry, time.Now())
	})
}

// sweepExpired deletes up to sweepDocuments documents expired at now.
func sweepExpired(docs, expiry *bbolt.Bucket, now time.Time) error {
	end := u64(unixNano(now))
	var gone [][]byte
	c := expiry.Cursor()
	for k, _ := c.First(); k != nil && len(gone) < sweepDocuments && bytes.Compare(k[:8], end) < 0; k, _ = c.Next() {
		gone = append(gone, bytes.Clone(k))
	}
	for _, k := range gone {
		if err := expiry.Delete(k); err != nil {
			return err
		}
		if err := docs.Delete([]byte(timeIDKeyID(k))); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) GetDocument(ctx context.Context, key string) (backends.Document, error) {
	var d backends.Document
	var found bool
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		d, found, err = getDocument(tx, key)
		return err
	})
	if err == nil && (!found || !d.Expires.After(time.Now())) {
		return backends.Document{}, fmt.Errorf("document %s: %w", key, backends.ErrNotFound)
	}
	return d, err
}

func (s *Store) ListDocuments(ctx context.Context, prefix string) ([]backends.Document, error) {
	var out []backends.Document
	now := time.Now()
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketDocuments).Cursor()
		p := []byte(prefix)
		for k, v := c.Seek(p); k != nil && bytes.HasPrefix(k, p); k, v = c.Next() {
			var d backends.Document
			if err := json.Unmarshal(v, &d); err != nil {
				return fmt.Errorf("document %s: %w", k, err)
			}
			if d.Expires.After(now) {
				out = append(out, d)
			}
		}
		return nil
	})
	return out, err
}
