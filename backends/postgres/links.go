package postgres

import (
	"context"
	"time"
)

func (s *Store) Link(ctx context.Context, key, messageID string) error {
	return s.sql.Link(key, messageID, func() (bool, error) {
		// DO NOTHING keeps the first link of a key.
		tag, err := s.pool.Exec(ctx, "INSERT INTO message_links (link_key, email_id, created_at) VALUES ($1, $2, $3) ON CONFLICT (link_key) DO NOTHING",
			key, messageID, ts(time.Now()))
		missing := pgCode(err) == codeForeignKeyViolation
		if err == nil && tag.RowsAffected() == 0 {
			// The key was linked already, which the foreign key does not
			// check then: the message must still be there.
			err = s.pool.QueryRow(ctx, "SELECT NOT EXISTS (SELECT 1 FROM emails WHERE id = $1)", messageID).Scan(&missing)
		}
		return missing, err
	})
}

func (s *Store) Linked(ctx context.Context, key string) (string, error) {
	return s.sql.Linked(ctx, key, stmt{Query: "SELECT email_id FROM message_links WHERE link_key = $1", Args: []any{key}})
}
