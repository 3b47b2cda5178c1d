package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
)

func (s *Store) Transition(ctx context.Context, t backends.Transition) error {
	if err := t.Prepare(time.Now().UTC()); err != nil {
		return err
	}
	pre := s.prepare(t)
	var refused error
	var event *backends.Event
	err := s.write(ctx, func(tx *bbolt.Tx) error {
		refused, event = nil, nil
		// A refusal is not an error for the batch: the others in it must
		// still commit, so it is reported beside.
		v := tx.Bucket(bucketMessages).Get([]byte(t.ID))
		if v == nil {
			refused = backends.ErrNotFound
			return nil
		}
		c, err := pre.against(v, t)
		if errors.Is(err, backends.ErrLockNotAcquired) {
			refused = err
			return nil
		}
		if err != nil {
			return err
		}
		if err := c.store(tx); err != nil {
			return err
		}
		if t.Alarm != nil {
			if err := setAlarm(tx, *t.Alarm); err != nil {
				return err
			}
		}
		if t.Event != nil {
			e := *t.Event // a retried group must start from the caller's event
			if err := insertEvent(tx, t.ID, &e, t.At); err != nil {
				return err
			}
			event = &e
		}
		return nil
	})
	if err == nil {
		err = refused
	}
	if err != nil {
		return fmt.Errorf("message %s %s to %s: %w", t.ID, t.From, t.To, err)
	}
	if event != nil {
		*t.Event = *event
	}
	return nil
}

// apply moves m, which is in t.From, through t inside tx.
func apply(tx *bbolt.Tx, m *backends.Message, t backends.Transition) error {
	c, err := plan(m, t)
	if err != nil {
		return err
	}
	return c.store(tx)
}

// change is a transition of one row worked out in full. Working it out
// (decoding and encoding the row) takes most of a transition's time, and
// every write of the relay runs in the one committer, one after another:
// so writers work their change out before their turn, and the committer
// only stores it, or works it out again when the row changed meanwhile.
type change struct {
	before backends.Message // the row as read, for the index entries to remove
	after  *backends.Message
	rec    []byte   // after, encoded
	hist   [][]byte // one history entry per move
	did    []backends.Activity
}

// plan works out t's change of m and applies it to m. A chain's
// intermediate statuses leave no index entry and no count behind, so only
// its history tells them.
func plan(m *backends.Message, t backends.Transition) (*change, error) {
	c := &change{before: *m, after: m, did: t.Activities()}
	t.Apply(m, t.Final())
	m.Version++
	var err error
	if c.rec, err = json.Marshal(m); err != nil {
		return nil, err
	}
	entry := func(e backends.HistoryEntry) {
		if err == nil {
			var b []byte
			b, err = json.Marshal(e)
			c.hist = append(c.hist, b)
		}
	}
	entry(backends.HistoryEntry{Status: t.To, Reason: t.Reason, At: t.At, Details: t.Details})
	for _, step := range t.Then {
		entry(backends.HistoryEntry{Status: step.To, Reason: step.Reason, At: t.At})
	}
	return c, err
}

func (c *change) store(tx *bbolt.Tx) error {
	if err := unindex(tx, &c.before); err != nil {
		return err
	}
	if err := index(tx, c.after); err != nil {
		return err
	}
	for _, h := range c.hist {
		if err := putHistory(tx, c.after.ID, h); err != nil {
			return err
		}
	}
	if err := tally(tx, c.did...); err != nil {
		return err
	}
	return tx.Bucket(bucketMessages).Put([]byte(c.after.ID), c.rec)
}

// prepared is a change worked out from a row read outside the committer.
type prepared struct {
	row []byte
	c   *change
}

// prepare reads t's row and works its change out. When the row cannot be
// read, the committer works it out and says why.
func (s *Store) prepare(t backends.Transition) prepared {
	var p prepared
	s.db.View(func(tx *bbolt.Tx) error {
		p = prepareRow(tx, t)
		return nil
	})
	return p
}

func prepareRow(tx *bbolt.Tx, t backends.Transition) prepared {
	v := tx.Bucket(bucketMessages).Get([]byte(t.ID))
	if v == nil {
		return prepared{}
	}
	row := bytes.Clone(v) // v lives only as long as tx
	m, err := decode(t.ID, row)
	if err != nil || !t.Holds(m) {
		return prepared{}
	}
	c, err := plan(m, t)
	if err != nil {
		return prepared{}
	}
	return prepared{row: row, c: c}
}

// against returns the prepared change when the row v is still the one it
// was worked out from, or works it out from v; ErrLockNotAcquired when v is
// not in t.From, or not under the lease t holds.
func (p prepared) against(v []byte, t backends.Transition) (*change, error) {
	if p.c != nil && bytes.Equal(v, p.row) {
		return p.c, nil
	}
	m, err := decode(t.ID, v)
	if err != nil {
		return nil, err
	}
	if !t.Holds(m) {
		return nil, backends.ErrLockNotAcquired
	}
	return plan(m, t)
}

func (s *Store) Claim(ctx context.Context, c backends.Claim) ([]*backends.Message, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Limit <= 0 {
		return nil, nil
	}
	pre := map[string]prepared{}
	s.db.View(func(tx *bbolt.Tx) error {
		for _, id := range claimable(tx, c) {
			pre[id] = prepareRow(tx, c.Move(id))
		}
		return nil
	})
	var out []*backends.Message
	err := s.write(ctx, func(tx *bbolt.Tx) error {
		out = out[:0]
		msgs := tx.Bucket(bucketMessages)
		for _, id := range claimable(tx, c) {
			v := msgs.Get([]byte(id))
			if v == nil {
				return fmt.Errorf("message %s is queued but has no row: %w", id, backends.ErrNotFound)
			}
			ch, err := pre[id].against(v, c.Move(id))
			if errors.Is(err, backends.ErrLockNotAcquired) {
				continue // the queue index is behind its row: leave the row as it is
			}
			if err != nil {
				return err
			}
			if err := ch.store(tx); err != nil {
				return err
			}
			out = append(out, ch.after)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", c.From, err)
	}
	return out, nil
}

// claimable lists the ids c would take, in the order it takes them.
func claimable(tx *bbolt.Tx, c backends.Claim) []string {
	return queued(tx, c.From, c.Now.Add(time.Nanosecond), c.Limit)
}

// queued lists up to n ids of status st whose queue time is before until,
// in queue order: by priority, then queue time.
func queued(tx *bbolt.Tx, st backends.Status, until time.Time, n int) []string {
	end := u64(unixNano(until))
	var ids []string
	cur := tx.Bucket(bucketQueue).Cursor()
	for p := backends.PriorityImmediate; p <= backends.PriorityLow && len(ids) < n; p++ {
		prefix := append(append([]byte(st), 0), byte(p))
		for k, _ := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(ids) < n; k, _ = cur.Next() {
			if bytes.Compare(k[len(prefix):len(prefix)+8], end) >= 0 {
				break // the rest of this priority comes later
			}
			ids = append(ids, queueKeyID(k))
		}
	}
	return ids
}

// restoreChunk bounds one restore transaction.
const restoreChunk = 500

func (s *Store) Restore(ctx context.Context, expiredBefore time.Time) (int, error) {
	total := 0
	for {
		n := 0
		now := time.Now().UTC()
		err := s.db.Update(func(tx *bbolt.Tx) error {
			n = 0
			limit := u64(unixNano(expiredBefore))
			var ids []string
			c := tx.Bucket(bucketLeases).Cursor()
			for k, _ := c.First(); k != nil && bytes.Compare(k[:8], limit) < 0 && len(ids) < restoreChunk; k, _ = c.Next() {
				ids = append(ids, timeIDKeyID(k))
			}
			for _, id := range ids {
				m, err := get(tx, id)
				if err != nil {
					return err
				}
				if err := apply(tx, m, backends.RestoreTransition(m, now)); err != nil {
					return err
				}
			}
			ne, err := restoreEvents(tx, expiredBefore, now, restoreChunk)
			if err != nil {
				return err
			}
			n = len(ids) + ne
			return nil
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("restore: %w", err)
		}
		if n == 0 {
			return total, nil
		}
	}
}

func (s *Store) Purge(ctx context.Context, cutoff time.Time, limit int) ([]*backends.Message, error) {
	var out []*backends.Message
	err := s.db.Update(func(tx *bbolt.Tx) error {
		out = out[:0]
		var ids []string
		for _, st := range backends.AcknowledgedStatuses() {
			ids = append(ids, queued(tx, st, cutoff, limit-len(ids))...)
		}
		for _, id := range ids {
			m, err := get(tx, id)
			if err != nil {
				return err
			}
			if err := remove(tx, m); err != nil {
				return err
			}
			out = append(out, m)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("purge: %w", err)
	}
	return out, nil
}

// remove deletes a message, its history and every index entry.
func remove(tx *bbolt.Tx, m *backends.Message) error {
	if err := unindex(tx, m); err != nil {
		return err
	}
	id := []byte(m.ID)
	if err := tx.Bucket(bucketMessages).Delete(id); err != nil {
		return err
	}
	if err := tx.Bucket(bucketCreated).Delete(timeIDKey(m.CreatedAt, m.ID)); err != nil {
		return err
	}
	if m.MessageID != "" {
		if err := tx.Bucket(bucketMsgIDs).Delete(pairKey(m.MessageID, m.ID)); err != nil {
			return err
		}
	}
	if m.Batch != "" {
		if err := tx.Bucket(bucketBatchMsgs).Delete(pairKey(m.Batch, m.ID)); err != nil {
			return err
		}
	}
	if err := removeEvents(tx, m.ID); err != nil {
		return err
	}
	if err := removeLinks(tx, m.ID); err != nil {
		return err
	}
	if err := removeAlarms(tx, m.ID); err != nil {
		return err
	}
	prefix := pairKey(m.ID, "")
	h := tx.Bucket(bucketHistory)
	for _, k := range keysUnder(h, prefix) {
		if err := h.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
