package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
)

// minuteKey is the start of the keys of a minute in the activity bucket:
// its Unix time, which sorts as time.
func minuteKey(t time.Time) []byte { return u64(uint64(backends.MinuteOf(t).Unix())) }

// tally counts one of each activity of acts in the current minute.
func tally(tx *bbolt.Tx, acts ...backends.Activity) error {
	if len(acts) == 0 {
		return nil
	}
	b := tx.Bucket(bucketActivity)
	minute := minuteKey(time.Now())
	for _, a := range acts {
		if err := add(b, append(minute[:8:8], a...), 1); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) Minutes(ctx context.Context, since time.Time) ([]backends.Minute, error) {
	tally := backends.Tally{}
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketActivity).Cursor()
		for k, v := c.Seek(minuteKey(since)); k != nil; k, v = c.Next() {
			at := time.Unix(int64(binary.BigEndian.Uint64(k[:8])), 0)
			tally.Add(at, backends.Activity(k[8:]), int(binary.BigEndian.Uint64(v)))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("minutes: %w", err)
	}
	return tally.Minutes(), nil
}

func (s *Store) PruneMinutes(ctx context.Context, before time.Time) error {
	err := s.db.Update(func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketActivity)
		end := minuteKey(before)
		c := b.Cursor()
		for k, _ := c.First(); k != nil && bytes.Compare(k[:8], end) < 0; k, _ = c.First() {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("prune minutes: %w", err)
	}
	return nil
}
