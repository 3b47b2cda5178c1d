package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
)

var (
	bucketSuppressions = []byte("suppressions") // key 0x00 scope -> Suppression JSON
	bucketSupHistory   = []byte("suphistory")   // key 0x00 seq -> SuppressionEvent JSON
	bucketSupExpiry    = []byte("supexpiry")    // expiry time, key 0x00 scope -> nil, for active entries that expire
	bucketSupCounts    = []byte("supcounts")    // reason -> count of active entries
)

func suppressionBuckets() [][]byte {
	return [][]byte{bucketSuppressions, bucketSupHistory, bucketSupExpiry, bucketSupCounts}
}

func getSuppression(tx *bbolt.Tx, k []byte) (*backends.Suppression, error) {
	v := tx.Bucket(bucketSuppressions).Get(k)
	if v == nil {
		return nil, nil
	}
	e := new(backends.Suppression)
	if err := json.Unmarshal(v, e); err != nil {
		return nil, fmt.Errorf("suppression %q: stored record is unreadable: %w", k, err)
	}
	return e, nil
}

// putSuppression replaces cur (nil: none) by next, with their indexes.
func putSuppression(tx *bbolt.Tx, cur *backends.Suppression, next backends.Suppression) error {
	if cur != nil {
		if err := deleteSuppression(tx, *cur); err != nil {
			return err
		}
	}
	k := pairKey(next.Key, next.Scope)
	v, err := json.Marshal(next)
	if err != nil {
		return err
	}
	if err := tx.Bucket(bucketSuppressions).Put(k, v); err != nil {
		return err
	}
	if !next.Active {
		return nil
	}
	if !next.Expires.IsZero() {
		if err := tx.Bucket(bucketSupExpiry).Put(append(u64(unixNano(next.Expires)), k...), nil); err != nil {
			return err
		}
	}
	return add(tx.Bucket(bucketSupCounts), []byte(next.Reason), 1)
}

func deleteSuppression(tx *bbolt.Tx, e backends.Suppression) error {
	k := pairKey(e.Key, e.Scope)
	if err := tx.Bucket(bucketSuppressions).Delete(k); err != nil {
		return err
	}
	if !e.Active {
		return nil
	}
	if !e.Expires.IsZero() {
		if err := tx.Bucket(bucketSupExpiry).Delete(append(u64(unixNano(e.Expires)), k...)); err != nil {
			return err
		}
	}
	return add(tx.Bucket(bucketSupCounts), []byte(e.Reason), -1)
}

func putSupHistory(tx *bbolt.Tx, ev backends.SuppressionEvent) error {
	h := tx.Bucket(bucketSupHistory)
	seq, err := h.NextSequence()
	if err != nil {
		return err
	}
	v, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	return h.Put(append(pairKey(ev.Key, ""), u64(seq)...), v)
}

func (s *Store) Suppress(ctx context.Context, c backends.SuppressionChange) (backends.Suppression, error) {
	if err := c.Check(); err != nil {
		return backends.Suppression{}, err
	}
	var out backends.Suppression
	err := s.write(ctx, func(tx *bbolt.Tx) error {
		cur, err := getSuppression(tx, pairKey(c.Entry.Key, c.Entry.Scope))
		if err != nil {
			return err
		}
		next, changed := c.Apply(cur)
		out = next
		if !changed {
			return nil
		}
		if err := putSuppression(tx, cur, next); err != nil {
			return err
		}
		return putSupHistory(tx, c.EventOf(next))
	})
	return out, err
}

func (s *Store) Suppressed(ctx context.Context, stream string, addrs []string, now time.Time) ([]backends.Suppression, error) {
	var out []backends.Suppression
	err := s.db.View(func(tx *bbolt.Tx) error {
		for _, key := range backends.SuppressionKeys(addrs) {
			for _, scope := range []string{backends.ScopeAll, stream} {
				e, err := getSuppression(tx, pairKey(key, scope))
				if err != nil {
					return err
				}
				if e != nil && e.Blocks(now) {
					out = append(out, *e)
				}
			}
		}
		return nil
	})
	return out, err
}

func (s *Store) SuppressionsOf(ctx context.Context, addr string) ([]backends.Suppression, error) {
	key, err := backends.SuppressionKey(addr)
	if err != nil {
		return nil, err
	}
	var out []backends.Suppression
	err = s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketSuppressions).Cursor()
		prefix := pairKey(key, "")
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var e backends.Suppression
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("suppression %q: stored record is unreadable: %w", k, err)
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

func (s *Store) Unsuppress(ctx context.Context, r backends.SuppressionRemoval) error {
	key, err := backends.SuppressionKey(r.Address)
	if err != nil {
		return err
	}
	return s.write(ctx, func(tx *bbolt.Tx) error {
		cur, err := getSuppression(tx, pairKey(key, r.Scope))
		if err != nil {
			return err
		}
		if cur == nil {
			return fmt.Errorf("%s has no suppression of scope %s: %w", r.Address, r.Scope, backends.ErrNotFound)
		}
		if err := deleteSuppression(tx, *cur); err != nil {
			return err
		}
		return putSupHistory(tx, r.RemovalEvent(key, cur.Reason))
	})
}

func (s *Store) SuppressionHistory(ctx context.Context, addr string) ([]backends.SuppressionEvent, error) {
	key, err := backends.SuppressionKey(addr)
	if err != nil {
		return nil, err
	}
	var out []backends.SuppressionEvent
	err = s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketSupHistory).Cursor()
		prefix := pairKey(key, "")
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var ev backends.SuppressionEvent
			if err := json.Unmarshal(v, &ev); err != nil {
				return fmt.Errorf("suppression history of %s: stored record is unreadable: %w", key, err)
			}
			out = append(out, ev)
		}
		return nil
	})
	return out, err
}

func (s *Store) ListSuppressions(ctx context.Context, q backends.SuppressionQuery) ([]backends.Suppression, string, error) {
	start := []byte(q.Prefix)
	if q.After != "" {
		key, scope, err := backends.ParseSuppressionCursor(q.After)
		if err != nil {
			return nil, "", err
		}
		// Just past the cursor's entry.
		start = append(pairKey(key, scope), 0)
	}
	var out []backends.Suppression
	more, limit := false, q.PageSize()
	err := s.db.View(func(tx *bbolt.Tx) error {
		c := tx.Bucket(bucketSuppressions).Cursor()
		for k, v := c.Seek(start); k != nil && bytes.HasPrefix(k, []byte(q.Prefix)); k, v = c.Next() {
			var e backends.Suppression
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("suppression %q: stored record is unreadable: %w", k, err)
			}
			if !e.Active || q.Reason != "" && e.Reason != q.Reason {
				continue
			}
			if len(out) == limit {
				more = true
				return nil
			}
			out = append(out, e)
		}
		return nil
	})
	if err != nil || !more {
		return out, "", err
	}
	return out, backends.SuppressionCursor(out[len(out)-1]), nil
}

func (s *Store) SuppressionCounts(ctx context.Context) (map[backends.SuppressionReason]int, error) {
	out := make(map[backends.SuppressionReason]int)
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketSupCounts).ForEach(func(k, v []byte) error {
			if n := int(binary.BigEndian.Uint64(v)); n > 0 {
				out[backends.SuppressionReason(k)] = n
			}
			return nil
		})
	})
	return out, err
}

// importChunk bounds the entries of one transaction of an import: the
// file's pages a transaction dirties stay in memory until it commits.
const importChunk = 10000

// ImportSuppressions writes the entries in transactions of importChunk
// each, outside the group commit, whose transactions stay small: an
// import run again after a failure ends the same.
func (s *Store) ImportSuppressions(ctx context.Context, entries []backends.Suppression, by string) error {
	for len(entries) > 0 {
		n := min(len(entries), importChunk)
		chunk := entries[:n]
		entries = entries[n:]
		err := s.db.Update(func(tx *bbolt.Tx) error {
			for _, e := range chunk {
				if e.Key == "" {
					return errors.New("import: an entry was not prepared (backends.PrepareImport)")
				}
				cur, err := getSuppression(tx, pairKey(e.Key, e.Scope))
				if err != nil {
					return err
				}
				if err := putSuppression(tx, cur, e); err != nil {
					return err
				}
				if err := putSupHistory(tx, backends.ImportEvent(e, by)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("import: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) PruneSuppressions(ctx context.Context, now time.Time, limit int) (int, error) {
	n := 0
	err := s.write(ctx, func(tx *bbolt.Tx) error {
		n = 0
		for _, k := range expiredBefore(tx, now, limit) {
			e, err := getSuppression(tx, k[8:])
			if err != nil {
				return err
			}
			if e == nil {
				// An index key without its entry: dropped, so that the
				// prune goes on past it.
				if err := tx.Bucket(bucketSupExpiry).Delete(k); err != nil {
					return err
				}
				continue
			}
			if err := deleteSuppression(tx, *e); err != nil {
				return err
			}
			ev := backends.SuppressionEvent{Key: e.Key, Scope: e.Scope, At: now, Action: backends.ActionExpired, Reason: e.Reason, By: "retention"}
			if err := putSupHistory(tx, ev); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// expiredBefore returns up to limit keys of bucketSupExpiry before now,
// copied, since the caller then deletes them.
func expiredBefore(tx *bbolt.Tx, now time.Time, limit int) [][]byte {
	var out [][]byte
	end := u64(unixNano(now))
	c := tx.Bucket(bucketSupExpiry).Cursor()
	for k, _ := c.First(); k != nil && len(out) < limit && bytes.Compare(k[:8], end) < 0; k, _ = c.Next() {
		out = append(out, bytes.Clone(k))
	}
	return out
}
