package mysql

import "github.com/genropy/postino/backends/internal/sqlstore"

// documentStmts are the statements of the documents.
var documentStmts = sqlstore.DocumentStmts{
	Put:   "INSERT INTO documents (doc_key, value, expires_at) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE value = VALUES(value), expires_at = VALUES(expires_at)",
	Get:   "SELECT doc_key, value, expires_at FROM documents WHERE doc_key = ? AND expires_at > ?",
	List:  "SELECT doc_key, value, expires_at FROM documents WHERE doc_key LIKE ? AND expires_at > ? ORDER BY doc_key",
	Sweep: "DELETE FROM documents WHERE expires_at <= ? ORDER BY expires_at LIMIT 100",
}
