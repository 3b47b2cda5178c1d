package mysql

import (
	"context"
	"time"
)

// Link looks for the message first: INSERT IGNORE would pass over the
// foreign key's refusal too.
func (s *Store) Link(ctx context.Context, key, messageID string) error {
	return s.sql.Link(key, messageID, func() (bool, error) {
		var n int
		if err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM emails WHERE id = ?", messageID).Scan(&n); err != nil || n == 0 {
			return err == nil, err
		}
		// IGNORE keeps the first link of a key.
		_, err := s.db.ExecContext(ctx, "INSERT IGNORE INTO message_links (link_key, email_id, created_at) VALUES (?, ?, ?)",
			key, messageID, time.Now().UTC())
		return false, err
	})
}

func (s *Store) Linked(ctx context.Context, key string) (string, error) {
	return s.sql.Linked(ctx, key, stmt{Query: "SELECT email_id FROM message_links WHERE link_key = ?", Args: []any{key}})
}
