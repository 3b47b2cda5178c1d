package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
)

func (s *Store) SuspendBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	return s.db.Update(func(tx *bbolt.Tx) error { return suspend(tx, code) })
}

func suspend(tx *bbolt.Tx, code string) error {
	if err := tx.Bucket(bucketBatches).Put([]byte(code), u64(uint64(time.Now().UnixNano()))); err != nil {
		return err
	}
	return moveBatch(tx, code, bucketQueue, bucketHeld)
}

func (s *Store) ActivateBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	return s.db.Update(func(tx *bbolt.Tx) error {
		if err := tx.Bucket(bucketBatches).Delete([]byte(code)); err != nil {
			return err
		}
		if tx.Bucket(bucketTallies).Get([]byte(code)) != nil {
			t, err := getTally(tx, code)
			if err != nil {
				return err
			}
			if err := putTally(tx, code, t.Restart()); err != nil {
				return err
			}
		}
		return moveBatch(tx, code, bucketHeld, bucketQueue)
	})
}

// moveBatch moves the queue keys of the batch's READY messages between the
// claimable queue and the held set.
func moveBatch(tx *bbolt.Tx, code string, from, to []byte) error {
	for _, id := range suffixesUnder(tx.Bucket(bucketBatchMsgs), pairKey(code, "")) {
		m, err := get(tx, id)
		if err != nil {
			return err
		}
		if m.Status != backends.StatusReady {
			continue
		}
		k := queueKey(m)
		if err := tx.Bucket(from).Delete(k); err != nil {
			return err
		}
		if err := tx.Bucket(to).Put(k, nil); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) SuspendedBatches(ctx context.Context) ([]string, error) {
	var out []string
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketBatches).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}

// bucketTallies: batch code -> BatchTally JSON.
var bucketTallies = []byte("tallies")

func getTally(tx *bbolt.Tx, code string) (backends.BatchTally, error) {
	var t backends.BatchTally
	v := tx.Bucket(bucketTallies).Get([]byte(code))
	if v == nil {
		return t, nil
	}
	if err := json.Unmarshal(v, &t); err != nil {
		return t, fmt.Errorf("tally of batch %s: stored record is unreadable: %w", code, err)
	}
	return t, nil
}

func putTally(tx *bbolt.Tx, code string, t backends.BatchTally) error {
	v, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketTallies).Put([]byte(code), v)
}

func (s *Store) TallyBatches(ctx context.Context, tallies map[string]backends.BatchTally) error {
	for code := range tallies {
		if err := backends.CheckBatch(code); err != nil {
			return err
		}
	}
	return s.write(ctx, func(tx *bbolt.Tx) error {
		for code, add := range tallies {
			t, err := getTally(tx, code)
			if err != nil {
				return err
			}
			t.Add(add)
			if err := putTally(tx, code, t); err != nil {
				return err
			}
		}
		return nil
	})
}

func (s *Store) BatchTallies(ctx context.Context, codes []string) (map[string]backends.BatchTally, error) {
	out := map[string]backends.BatchTally{}
	err := s.db.View(func(tx *bbolt.Tx) error {
		for _, code := range codes {
			if tx.Bucket(bucketTallies).Get([]byte(code)) == nil {
				continue
			}
			t, err := getTally(tx, code)
			if err != nil {
				return err
			}
			out[code] = t
		}
		return nil
	})
	return out, err
}

func (s *Store) TripBatch(ctx context.Context, code, reason string, at time.Time) (bool, error) {
	if err := backends.CheckBatch(code); err != nil {
		return false, err
	}
	tripped := false
	err := s.write(ctx, func(tx *bbolt.Tx) error {
		tripped = false
		if tx.Bucket(bucketBatches).Get([]byte(code)) != nil {
			return nil
		}
		t, err := getTally(tx, code)
		if err != nil {
			return err
		}
		t.Tripped, t.TrippedAt = reason, at
		if err := putTally(tx, code, t); err != nil {
			return err
		}
		if err := suspend(tx, code); err != nil {
			return err
		}
		tripped = true
		return nil
	})
	return tripped, err
}

func (s *Store) ListBatches(ctx context.Context, after string, limit int) ([]string, string, error) {
	if limit <= 0 {
		limit = backends.DefaultPageSize
	}
	var out []string
	more := false
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketTallies).Cursor()
		k, _ := c.Seek([]byte(after))
		if after != "" && string(k) == after {
			k, _ = c.Next()
		}
		for ; k != nil; k, _ = c.Next() {
			if len(out) == limit {
				more = true
				return nil
			}
			out = append(out, string(k))
		}
		return nil
	})
	if err != nil || !more {
		return out, "", err
	}
	return out, out[len(out)-1], nil
}

func (s *Store) BatchCounts(ctx context.Context, code string) (map[backends.Status]int, error) {
	out := map[backends.Status]int{}
	err := s.db.View(func(tx *bbolt.Tx) error {
		prefix := pairKey(code, "")
		c := tx.Bucket(bucketBatchMsgs).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			m, err := get(tx, string(k[len(prefix):]))
			if err != nil {
				return err
			}
			out[m.Status]++
		}
		return nil
	})
	return out, err
}
