package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends"
)

func (s *Store) ClaimCursor(ctx context.Context, name, owner string, until time.Time) (backends.Cursor, error) {
	if err := backends.CheckCursorName(name); err != nil {
		return backends.Cursor{}, err
	}
	var c backends.Cursor
	err := s.tx(ctx, func(tx pgx.Tx) error {
		now := ts(time.Now())
		if _, err := tx.Exec(ctx, "INSERT INTO mailbox_cursors (name, updated_at) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING", name, now); err != nil {
			return err
		}
		held, err := lockCursor(ctx, tx, name)
		if err != nil {
			return err
		}
		if c, err = held.Claim(owner, until, now); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "UPDATE mailbox_cursors SET owner = $1, lease_until = $2, updated_at = $3 WHERE name = $4",
			owner, nullTime(c.LeaseUntil), now, name)
		return err
	})
	if err != nil {
		return backends.Cursor{}, err
	}
	return c, nil
}

func (s *Store) SaveCursor(ctx context.Context, name, owner string, c backends.Cursor) error {
	return s.tx(ctx, func(tx pgx.Tx) error {
		held, err := lockCursor(ctx, tx, name)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("cursor %s was never claimed: %w", name, backends.ErrLockNotAcquired)
		}
		if err != nil {
			return err
		}
		if held, err = held.Save(owner, c); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "UPDATE mailbox_cursors SET uid_validity = $1, last_uid = $2, updated_at = $3 WHERE name = $4",
			int64(held.UIDValidity), int64(held.LastUID), ts(time.Now()), name)
		return err
	})
}

// lockCursor reads a cursor, locking its row until the commit.
func lockCursor(ctx context.Context, tx pgx.Tx, name string) (backends.Cursor, error) {
	var c backends.Cursor
	var validity, last int64
	var lease *time.Time
	err := tx.QueryRow(ctx, "SELECT uid_validity, last_uid, owner, lease_until FROM mailbox_cursors WHERE name = $1 FOR UPDATE", name).
		Scan(&validity, &last, &c.Owner, &lease)
	c.UIDValidity, c.LastUID, c.LeaseUntil = uint32(validity), uint32(last), tm(lease)
	return c, err
}
