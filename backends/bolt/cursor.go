package bolt

import (
	"context"
	"encoding/json"
	"time"

	"go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
)

// bucketCursors holds the mailbox pollers' cursors: name -> Cursor JSON.
// They are written outside the group commit: rare, and a refusal must not
// send a whole group back to be retried one by one.
var bucketCursors = []byte("cursors")

func getCursor(tx *bbolt.Tx, name string) (backends.Cursor, error) {
	var c backends.Cursor
	b := tx.Bucket(bucketCursors).Get([]byte(name))
	if b == nil {
		return c, nil
	}
	return c, json.Unmarshal(b, &c)
}

func putCursor(tx *bbolt.Tx, name string, c backends.Cursor) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketCursors).Put([]byte(name), b)
}

func (s *Store) ClaimCursor(ctx context.Context, name, owner string, until time.Time) (backends.Cursor, error) {
	if err := backends.CheckCursorName(name); err != nil {
		return backends.Cursor{}, err
	}
	var out backends.Cursor
	err := s.db.Update(func(tx *bbolt.Tx) error {
		c, err := getCursor(tx, name)
		if err != nil {
			return err
		}
		if out, err = c.Claim(owner, until, time.Now()); err != nil {
			return err
		}
		return putCursor(tx, name, out)
	})
	if err != nil {
		return backends.Cursor{}, err
	}
	return out, nil
}

func (s *Store) SaveCursor(ctx context.Context, name, owner string, c backends.Cursor) error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		cur, err := getCursor(tx, name)
		if err != nil {
			return err
		}
		if cur, err = cur.Save(owner, c); err != nil {
			return err
		}
		return putCursor(tx, name, cur)
	})
}

func (s *Store) ReadCursor(ctx context.Context, name string) (backends.Cursor, error) {
	var c backends.Cursor
	err := s.db.View(func(tx *bbolt.Tx) (err error) {
		c, err = getCursor(tx, name)
		return err
	})
	return c, err
}
