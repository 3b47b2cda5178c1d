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

// Event buckets.
var (
	bucketEvents    = []byte("events")    // event id -> Event JSON
	bucketMsgEvents = []byte("msgevents") // message id 0x00 seq -> event id
	bucketEvQueue   = []byte("evqueue")   // due time, event id -> nil: pending events first in line (queueHead)
	bucketEvLeases  = []byte("evleases")  // lease time, event id -> nil: calling events
	bucketEvStates  = []byte("evstates")  // state 0x00 updated time, event id -> nil
)

func eventBuckets() [][]byte {
	return [][]byte{bucketEvents, bucketMsgEvents, bucketEvQueue, bucketEvLeases, bucketEvStates}
}

func getEvent(tx *bbolt.Tx, id string) (*backends.Event, error) {
	v := tx.Bucket(bucketEvents).Get([]byte(id))
	if v == nil {
		return nil, fmt.Errorf("event %s: %w", id, backends.ErrNotFound)
	}
	e := new(backends.Event)
	if err := json.Unmarshal(v, e); err != nil {
		return nil, fmt.Errorf("event %s: stored record is unreadable: %w", id, err)
	}
	return e, nil
}

func putEvent(tx *bbolt.Tx, e *backends.Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketEvents).Put([]byte(e.ID), b)
}

func evStateKey(e *backends.Event) []byte {
	return append(append([]byte(e.State), 0), timeIDKey(e.UpdatedAt, e.ID)...)
}

// indexEvent adds the entries of e's state but the claim queue's, which
// holds only the events first in line (queueHead).
func indexEvent(tx *bbolt.Tx, e *backends.Event) error {
	if e.State == backends.EventCalling {
		if err := tx.Bucket(bucketEvLeases).Put(timeIDKey(e.LeaseUntil, e.ID), nil); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketEvStates).Put(evStateKey(e), nil)
}

// queueHead puts the message's first unacknowledged event in the claim
// queue when it is pending: events wait behind it, out of the queue, so
// that a claim reads only events it may take. Once the first is
// acknowledged, the next takes its place.
func queueHead(tx *bbolt.Tx, messageID string) error {
	h, err := headEvent(tx, messageID)
	if err != nil || h == nil || h.State != backends.EventPending {
		return err
	}
	return tx.Bucket(bucketEvQueue).Put(timeIDKey(h.DueAt, h.ID), nil)
}

func unindexEvent(tx *bbolt.Tx, e *backends.Event) error {
	if err := tx.Bucket(bucketEvQueue).Delete(timeIDKey(e.DueAt, e.ID)); err != nil {
		return err
	}
	if err := tx.Bucket(bucketEvLeases).Delete(timeIDKey(e.LeaseUntil, e.ID)); err != nil {
		return err
	}
	return tx.Bucket(bucketEvStates).Delete(evStateKey(e))
}

// insertEvent stores a new event of message id at time at.
func insertEvent(tx *bbolt.Tx, id string, e *backends.Event, at time.Time) error {
	if err := e.Prepare(id, at); err != nil {
		return err
	}
	if tx.Bucket(bucketEvents).Get([]byte(e.ID)) != nil {
		return fmt.Errorf("event %s: %w", e.ID, backends.ErrDuplicate)
	}
	// The next sequence number follows the message's last event; a message
	// has few.
	prefix := pairKey(id, "")
	e.Seq = 1
	c := tx.Bucket(bucketMsgEvents).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		e.Seq = int64(binary.BigEndian.Uint64(k[len(prefix):])) + 1
	}
	if err := tx.Bucket(bucketMsgEvents).Put(binary.BigEndian.AppendUint64(prefix, uint64(e.Seq)), []byte(e.ID)); err != nil {
		return err
	}
	if err := indexEvent(tx, e); err != nil {
		return err
	}
	if err := putEvent(tx, e); err != nil {
		return err
	}
	return queueHead(tx, id)
}

func (s *Store) AddEvent(ctx context.Context, e *backends.Event) error {
	now := time.Now().UTC()
	err := s.write(ctx, func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketMessages).Get([]byte(e.MessageID)) == nil {
			return fmt.Errorf("message %s: %w", e.MessageID, backends.ErrNotFound)
		}
		return insertEvent(tx, e.MessageID, e, now)
	})
	if err != nil {
		return fmt.Errorf("add event to %s: %w", e.MessageID, err)
	}
	return nil
}

func (s *Store) Events(ctx context.Context, messageID string) ([]*backends.Event, error) {
	var out []*backends.Event
	err := s.db.View(func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketMessages).Get([]byte(messageID)) == nil {
			return fmt.Errorf("message %s: %w", messageID, backends.ErrNotFound)
		}
		var err error
		out, err = messageEvents(tx, messageID)
		return err
	})
	return out, err
}

func messageEvents(tx *bbolt.Tx, messageID string) ([]*backends.Event, error) {
	var out []*backends.Event
	prefix := pairKey(messageID, "")
	c := tx.Bucket(bucketMsgEvents).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		e, err := getEvent(tx, string(v))
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func (s *Store) EventsByState(ctx context.Context, state backends.EventState, limit int) ([]*backends.Event, error) {
	var out []*backends.Event
	err := s.db.View(func(tx *bbolt.Tx) error {
		prefix := append([]byte(state), 0)
		c := tx.Bucket(bucketEvStates).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(out) < limit; k, _ = c.Next() {
			e, err := getEvent(tx, string(k[len(prefix)+8:]))
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// headEvent is the earliest unacknowledged event of a message, the only
// one that may be called; nil when all are acknowledged.
func headEvent(tx *bbolt.Tx, messageID string) (*backends.Event, error) {
	prefix := pairKey(messageID, "")
	c := tx.Bucket(bucketMsgEvents).Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		e, err := getEvent(tx, string(v))
		if err != nil {
			return nil, err
		}
		if e.State != backends.EventAcked {
			return e, nil
		}
	}
	return nil, nil
}

func (s *Store) ClaimEvents(ctx context.Context, c backends.EventClaim) ([]*backends.Event, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	var out []*backends.Event
	err := s.write(ctx, func(tx *bbolt.Tx) error {
		var err error
		out, err = claimEvents(tx, c)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim events: %w", err)
	}
	return out, nil
}

// claimEvents claims the due events of the queue in order, up to c.Limit.
// The queue holds only the events first in line for their message, so it
// reads only events it may take, however many wait behind them.
func claimEvents(tx *bbolt.Tx, c backends.EventClaim) ([]*backends.Event, error) {
	ids := dueEvents(tx, u64(unixNano(c.Now)), c.Limit)
	out := make([]*backends.Event, 0, len(ids))
	etx := &eventTx{tx: tx}
	for _, id := range ids {
		e, err := getEvent(tx, id)
		if err != nil {
			return nil, err
		}
		claimed, err := backends.ClaimEvent(etx, e, c)
		if err != nil {
			return nil, err
		}
		out = append(out, claimed)
	}
	return out, nil
}

// dueEvents lists up to n ids of queued events due at or before now, in
// queue order.
func dueEvents(tx *bbolt.Tx, now []byte, n int) []string {
	var ids []string
	cur := tx.Bucket(bucketEvQueue).Cursor()
	for k, _ := cur.First(); k != nil && bytes.Compare(k[:8], now) <= 0 && len(ids) < n; k, _ = cur.Next() {
		ids = append(ids, timeIDKeyID(k))
	}
	return ids
}

func (s *Store) UpdateEvent(ctx context.Context, u backends.EventUpdate) (*backends.Event, error) {
	if err := u.Prepare(time.Now().UTC()); err != nil {
		return nil, err
	}
	var out *backends.Event
	var refused error
	err := s.write(ctx, func(tx *bbolt.Tx) error {
		var err error
		out, err = backends.UpdateEvent(&eventTx{tx: tx}, u)
		refused = nil
		if out == nil && (errors.Is(err, backends.ErrNotFound) || errors.Is(err, backends.ErrLockNotAcquired)) {
			// A refusal (nothing written: the event is not there, or not
			// in u.From) is not an error for the group: the others in it
			// must still commit, so it is reported beside.
			refused, err = err, nil
		}
		return err
	})
	if err == nil {
		err = refused
	}
	if err != nil {
		return nil, fmt.Errorf("event %s %s to %s: %w", u.ID, u.From, u.To, err)
	}
	return out, nil
}

// eventTx is a bbolt transaction as backends' event rules see it.
type eventTx struct {
	tx *bbolt.Tx
	m  *backends.Message // the message Status read last, for Move
}

func (t *eventTx) Event(id string) (*backends.Event, error) { return getEvent(t.tx, id) }

func (t *eventTx) PutEvent(before, after *backends.Event) error {
	if err := unindexEvent(t.tx, before); err != nil {
		return err
	}
	if err := indexEvent(t.tx, after); err != nil {
		return err
	}
	if err := putEvent(t.tx, after); err != nil {
		return err
	}
	return queueHead(t.tx, after.MessageID)
}

func (t *eventTx) Status(id string) (backends.Status, error) {
	m, err := get(t.tx, id)
	if err != nil {
		return "", err
	}
	t.m = m
	return m.Status, nil
}

func (t *eventTx) Move(tr backends.Transition) error {
	m := t.m
	if m == nil || m.ID != tr.ID {
		var err error
		if m, err = get(t.tx, tr.ID); err != nil {
			return err
		}
	}
	t.m = nil // apply changes m
	return apply(t.tx, m, tr)
}

// restoreEvents returns calling events whose lease ran out to pending.
func restoreEvents(tx *bbolt.Tx, expiredBefore, now time.Time, limit int) (int, error) {
	var ids []string
	c := tx.Bucket(bucketEvLeases).Cursor()
	lim := u64(unixNano(expiredBefore))
	for k, _ := c.First(); k != nil && bytes.Compare(k[:8], lim) < 0 && len(ids) < limit; k, _ = c.Next() {
		ids = append(ids, timeIDKeyID(k))
	}
	for _, id := range ids {
		e, err := getEvent(tx, id)
		if err != nil {
			return 0, err
		}
		if err := unindexEvent(tx, e); err != nil {
			return 0, err
		}
		backends.RestoreEvent(e, now)
		if err := indexEvent(tx, e); err != nil {
			return 0, err
		}
		if err := putEvent(tx, e); err != nil {
			return 0, err
		}
		if err := queueHead(tx, e.MessageID); err != nil {
			return 0, err
		}
	}
	return len(ids), nil
}

// removeEvents deletes a message's events.
func removeEvents(tx *bbolt.Tx, messageID string) error {
	events, err := messageEvents(tx, messageID)
	if err != nil {
		return err
	}
	for _, e := range events {
		if err := unindexEvent(tx, e); err != nil {
			return err
		}
		if err := tx.Bucket(bucketEvents).Delete([]byte(e.ID)); err != nil {
			return err
		}
		if err := tx.Bucket(bucketMsgEvents).Delete(binary.BigEndian.AppendUint64(pairKey(messageID, ""), uint64(e.Seq))); err != nil {
			return err
		}
	}
	return nil
}
