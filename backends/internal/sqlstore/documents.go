package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
)

// DocumentStmts are a store's statements of the documents, each with its
// arguments in the order given. The key column has a binary collation, so
// that the listing is in byte order, as the other stores list.
type DocumentStmts struct {
	// Put writes a document, replacing the one under its key: key,
	// value, expires_at.
	Put string
	// Get reads key, value and expires_at of a document that has not
	// expired: key, now.
	Get string
	// List reads key, value and expires_at of the documents that have not
	// expired under a LIKE pattern, in key order: pattern, now.
	List string
	// Sweep deletes some expired documents, a hundred at most: now.
	Sweep string
}

// Documents is backends.Documents over a store's statements; the MySQL and
// PostgreSQL stores embed it.
type Documents struct {
	s  Store
	st DocumentStmts
}

// NewDocuments serves the documents of s with its statements st.
func NewDocuments(s Store, st DocumentStmts) Documents { return Documents{s: s, st: st} }

// PutDocument is Documents.PutDocument: the put, then a sweep of expired
// documents, so that no housekeeping is needed for them.
func (l Documents) PutDocument(ctx context.Context, d backends.Document) error {
	s, st := l.s, l.st
	if err := backends.CheckDocument(d); err != nil {
		return err
	}
	value := d.Value
	if value == nil {
		value = []byte{}
	}
	if _, err := s.DB.Exec(ctx, st.Put, d.Key, value, s.Time(d.Expires)); err != nil {
		return fmt.Errorf("document %s: %w", d.Key, err)
	}
	if _, err := s.DB.Exec(ctx, st.Sweep, s.Time(time.Now())); err != nil {
		return fmt.Errorf("delete expired documents: %w", err)
	}
	return nil
}

// GetDocument is Documents.GetDocument.
func (l Documents) GetDocument(ctx context.Context, key string) (backends.Document, error) {
	s, st := l.s, l.st
	var d backends.Document
	err := queryRow(ctx, s.DB, Stmt{Query: st.Get, Args: []any{key, s.Time(time.Now())}}, &d.Key, &d.Value, &d.Expires)
	if errors.Is(err, errNoRow) {
		return d, fmt.Errorf("document %s: %w", key, backends.ErrNotFound)
	}
	d.Expires = d.Expires.UTC()
	return d, err
}

// ListDocuments is Documents.ListDocuments.
func (l Documents) ListDocuments(ctx context.Context, prefix string) ([]backends.Document, error) {
	s, st := l.s, l.st
	return QueryAll(ctx, s.DB, func(r Scanner) (backends.Document, error) {
		var d backends.Document
		err := r.Scan(&d.Key, &d.Value, &d.Expires)
		d.Expires = d.Expires.UTC()
		return d, err
	}, Stmt{Query: st.List, Args: []any{likePrefix(prefix), s.Time(time.Now())}})
}
