package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/genropy/postino/backends"
)

func (s *Store) ClaimCursor(ctx context.Context, name, owner string, until time.Time) (backends.Cursor, error) {
	if err := backends.CheckCursorName(name); err != nil {
		return backends.Cursor{}, err
	}
	var c backends.Cursor
	err := s.tx(ctx, func(tx *sql.Tx) error {
		now := time.Now().UTC()
		if _, err := tx.ExecContext(ctx, "INSERT IGNORE INTO mailbox_cursors (name, updated_at) VALUES (?, ?)", name, now); err != nil {
			return err
		}
		var lease sql.NullTime
		err := tx.QueryRowContext(ctx, "SELECT uid_validity, last_uid, owner, lease_until FROM mailbox_cursors WHERE name = ? FOR UPDATE", name).
			Scan(&c.UIDValidity, &c.LastUID, &c.Owner, &lease)
		if err != nil {
			return err
		}
		if c.Owner != "" && c.Owner != owner && lease.Valid && now.Before(lease.Time) {
			return backends.ErrLockNotAcquired
		}
		c.Owner, c.LeaseUntil = owner, until.UTC()
		_, err = tx.ExecContext(ctx, "UPDATE mailbox_cursors SET owner = ?, lease_until = ?, updated_at = ? WHERE name = ?", owner, c.LeaseUntil, now, name)
		return err
	})
	return c, err
}

func (s *Store) SaveCursor(ctx context.Context, name, owner string, c backends.Cursor) error {
	res, err := s.db.ExecContext(ctx, "UPDATE mailbox_cursors SET uid_validity = ?, last_uid = ?, updated_at = ? WHERE name = ? AND owner = ?",
		c.UIDValidity, c.LastUID, time.Now().UTC(), name, owner)
	if err != nil {
		return err
	}
	// MySQL counts changed rows: a save of the same values changes none,
	// so a miss is told apart by asking.
	if n, _ := res.RowsAffected(); n == 0 {
		var held string
		err := s.db.QueryRowContext(ctx, "SELECT owner FROM mailbox_cursors WHERE name = ?", name).Scan(&held)
		if err != nil || held != owner {
			return backends.ErrLockNotAcquired
		}
	}
	return nil
}
