package mysql

import (
	"context"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// documentStmts are the statements of the documents.
var documentStmts = sqlstore.DocumentStmts{
	Put:   "INSERT INTO documents (doc_key, value, expires_at) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value), expires_at = VALUES(expires_at)",
	Get:   "SELECT doc_key, value, expires_at FROM documents WHERE doc_key = ? AND expires_at > ?",
	List:  "SELECT doc_key, value, expires_at FROM documents WHERE doc_key LIKE ? AND expires_at > ? ORDER BY doc_key",
	Sweep: "DELETE FROM documents WHERE expires_at <= ? ORDER BY expires_at LIMIT 100",
}

func (s *Store) PutDocument(ctx context.Context, d backends.Document) error {
	return s.sql.PutDocument(ctx, documentStmts, d)
}

func (s *Store) GetDocument(ctx context.Context, key string) (backends.Document, error) {
	return s.sql.GetDocument(ctx, documentStmts, key)
}

func (s *Store) ListDocuments(ctx context.Context, prefix string) ([]backends.Document, error) {
	return s.sql.ListDocuments(ctx, documentStmts, prefix)
}
