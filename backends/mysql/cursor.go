package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
)

func (s *Store) ClaimCursor(ctx context.Context, name, owner string, until time.Time) (backends.Cursor, error) {
	if err := backends.CheckCursorName(name); err != nil {
		return backends.Cursor{}, err
	}
	var c backends.Cursor
	err := s.tx(ctx, func(tx *txn) error {
		now := time.Now().UTC()
		if _, err := tx.ExecContext(ctx, "INSERT IGNORE INTO mailbox_cursors (name, updated_at) VALUES (?, ?)", name, now); err != nil {
			return err
		}
		held, err := lockCursor(ctx, tx, name)
		if err != nil {
			return err
		}
		if c, err = held.Claim(owner, until, now); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "UPDATE mailbox_cursors SET owner = ?, lease_until = ?, updated_at = ? WHERE name = ?", owner, c.LeaseUntil, now, name)
		return err
	})
	if err != nil {
		return backends.Cursor{}, err
	}
	return c, nil
}

func (s *Store) SaveCursor(ctx context.Context, name, owner string, c backends.Cursor) error {
	return s.tx(ctx, func(tx *txn) error {
		held, err := lockCursor(ctx, tx, name)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("cursor %s was never claimed: %w", name, backends.ErrLockNotAcquired)
		}
		if err != nil {
			return err
		}
		if held, err = held.Save(owner, c); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, "UPDATE mailbox_cursors SET uid_validity = ?, last_uid = ?, updated_at = ? WHERE name = ?",
			held.UIDValidity, held.LastUID, time.Now().UTC(), name)
		return err
	})
}

// lockCursor reads a cursor, locking its row until the commit.
func lockCursor(ctx context.Context, tx *txn, name string) (backends.Cursor, error) {
	var c backends.Cursor
	var lease sql.NullTime
	rows, err := tx.QueryContext(ctx, "SELECT uid_validity, last_uid, owner, lease_until FROM mailbox_cursors WHERE name = ? FOR UPDATE", name)
	if err != nil {
		return c, err
	}
	defer rows.Close()
	if !rows.Next() {
		return c, cmp.Or(rows.Err(), sql.ErrNoRows)
	}
	err = rows.Scan(&c.UIDValidity, &c.LastUID, &c.Owner, &lease)
	c.LeaseUntil = lease.Time
	return c, err
}
