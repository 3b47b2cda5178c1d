package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
)

func (s *Store) Link(ctx context.Context, key, messageID string) error {
	if err := backends.CheckLinkKey(key); err != nil {
		return err
	}
	var n int
	if err := s.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM emails WHERE id = ?", messageID).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("link %s to %s: %w", key, messageID, backends.ErrNotFound)
	}
	// IGNORE keeps the first link of a key.
	_, err := s.db.ExecContext(ctx, "INSERT IGNORE INTO message_links (link_key, email_id, created_at) VALUES (?, ?, ?)",
		key, messageID, time.Now().UTC())
	return err
}

func (s *Store) Linked(ctx context.Context, key string) (string, error) {
	var id string
	err := s.db.QueryRowContext(ctx, "SELECT email_id FROM message_links WHERE link_key = ?", key).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("link %s: %w", key, backends.ErrNotFound)
	}
	return id, err
}
