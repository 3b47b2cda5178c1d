package postgres

import (
	"context"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// cursorStmts are the statements of the mailbox cursors.
var cursorStmts = sqlstore.CursorStmts{
	Insert: "INSERT INTO mailbox_cursors (name, updated_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
	Lock:   "SELECT uid_validity, last_uid, owner, lease_until FROM mailbox_cursors WHERE name = $1 FOR UPDATE",
	Claim:  "UPDATE mailbox_cursors SET owner = $1, lease_until = $2, updated_at = $3 WHERE name = $4",
	Save:   "UPDATE mailbox_cursors SET uid_validity = $1, last_uid = $2, updated_at = $3 WHERE name = $4",
	Read:   "SELECT uid_validity, last_uid, owner, lease_until FROM mailbox_cursors WHERE name = $1",
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
