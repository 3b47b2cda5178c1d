package mysql

import (
	"context"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// cursorStmts are the statements of the mailbox cursors.
var cursorStmts = sqlstore.CursorStmts{
	Insert: "INSERT IGNORE INTO mailbox_cursors (name, updated_at) VALUES (?, ?)",
	Lock:   "SELECT uid_validity, last_uid, owner, lease_until FROM mailbox_cursors WHERE name = ? FOR UPDATE",
	Claim:  "UPDATE mailbox_cursors SET owner = ?, lease_until = ?, updated_at = ? WHERE name = ?",
	Save:   "UPDATE mailbox_cursors SET uid_validity = ?, last_uid = ?, updated_at = ? WHERE name = ?",
	Read:   "SELECT uid_validity, last_uid, owner, lease_until FROM mailbox_cursors WHERE name = ?",
}

func (s *Store) ClaimCursor(ctx context.Context, name, owner string, until time.Time) (backends.Cursor, error) {
	return s.sql.ClaimCursor(ctx, cursorStmts, name, owner, until)
}

func (s *Store) SaveCursor(ctx context.Context, name, owner string, c backends.Cursor) error {
	return s.sql.SaveCursor(ctx, cursorStmts, name, owner, c)
}

func (s *Store) ReadCursor(ctx context.Context, name string) (backends.Cursor, error) {
	return s.sql.ReadCursor(ctx, cursorStmts, name)
}
