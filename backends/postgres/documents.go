package postgres

import "github.com/genropy/postino/backends/internal/sqlstore"

// documentStmts are the statements of the documents.
var documentStmts = sqlstore.DocumentStmts{
	Put:   "INSERT INTO documents (doc_key, value, expires_at) VALUES ($1, $2, $3) ON CONFLICT (doc_key) DO UPDATE SET value = EXCLUDED.value, expires_at = EXCLUDED.expires_at",
	Get:   "SELECT doc_key, value, expires_at FROM documents WHERE doc_key = $1 AND expires_at > $2",
	List:  "SELECT doc_key, value, expires_at FROM documents WHERE doc_key LIKE $1 AND expires_at > $2 ORDER BY doc_key",
	Sweep: "DELETE FROM documents WHERE doc_key IN (SELECT doc_key FROM documents WHERE expires_at <= $1 ORDER BY expires_at LIMIT 100)",
}
