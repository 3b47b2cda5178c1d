package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
)

// CursorStmts are a store's statements of the mailbox cursors, each with
// its arguments in the order given.
type CursorStmts struct {
	// Insert makes a cursor's row unless it is there: name, updated_at.
	Insert string
	// Lock reads and locks a cursor's row, uid_validity, last_uid, owner
	// and lease_until: name.
	Lock string
	// Claim sets the holder: owner, lease_until, updated_at, name.
	Claim string
	// Save sets how far the holder read: uid_validity, last_uid,
	// updated_at, name.
	Save string
	// Read reads a cursor's row as Lock does, without locking it: name.
	Read string
}

// ClaimCursor is Cursors.ClaimCursor, in a transaction.
func (s Store) ClaimCursor(ctx context.Context, c CursorStmts, name, owner string, until time.Time) (backends.Cursor, error) {
	if err := backends.CheckCursorName(name); err != nil {
		return backends.Cursor{}, err
	}
	var claimed backends.Cursor
	err := s.InTx(ctx, func(tx Tx) error {
		now := s.Time(time.Now())
		if _, err := tx.Exec(ctx, c.Insert, name, now); err != nil {
			return err
		}
		held, err := lockCursor(ctx, tx, c, name)
		if err != nil {
			return err
		}
		if claimed, err = held.Claim(owner, until, now); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, c.Claim, owner, s.Time(claimed.LeaseUntil), now, name)
		return err
	})
	if err != nil {
		return backends.Cursor{}, err
	}
	return claimed, nil
}

// SaveCursor is Cursors.SaveCursor, in a transaction.
func (s Store) SaveCursor(ctx context.Context, c CursorStmts, name, owner string, next backends.Cursor) error {
	return s.InTx(ctx, func(tx Tx) error {
		held, err := lockCursor(ctx, tx, c, name)
		if errors.Is(err, errNoRow) {
			return fmt.Errorf("cursor %s was never claimed: %w", name, backends.ErrLockNotAcquired)
		}
		if err != nil {
			return err
		}
		if held, err = held.Save(owner, next); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, c.Save, int64(held.UIDValidity), int64(held.LastUID), s.Time(time.Now()), name)
		return err
	})
}

// ReadCursor is Cursors.ReadCursor.
func (s Store) ReadCursor(ctx context.Context, c CursorStmts, name string) (backends.Cursor, error) {
	cur, err := lockCursor(ctx, s.DB, CursorStmts{Lock: c.Read}, name)
	if errors.Is(err, errNoRow) {
		return backends.Cursor{}, nil
	}
	return cur, err
}

// lockCursor reads a cursor, locking its row until the commit.
func lockCursor(ctx context.Context, tx DB, c CursorStmts, name string) (backends.Cursor, error) {
	var cur backends.Cursor
	var validity, last int64
	var lease *time.Time
	err := queryRow(ctx, tx, Stmt{Query: c.Lock, Args: []any{name}}, &validity, &last, &cur.Owner, &lease)
	cur.UIDValidity, cur.LastUID = uint32(validity), uint32(last)
	if lease != nil {
		cur.LeaseUntil = *lease
	}
	return cur, err
}
