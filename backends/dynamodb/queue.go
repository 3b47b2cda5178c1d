package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

type change struct {
	stmts []types.ParameterizedStatement
	m     *meta
}

// prepare applies t to m (read in t.From) and makes the statements.
func (s *Store) prepare(m *meta, t backends.Transition) (*change, error) {
	readStatus, readSeq, hadSeq := m.msg.Status, m.seq, m.hasSeq
	msg := &m.msg
	t.Apply(msg, t.Final())
	ttl := s.ttlFor(t.At)
	if ttl != nil {
		msg.TTL = ttl
	}
	var items []map[string]types.AttributeValue
	for i, st := range t.Steps() {
		m.seq++
		m.reached[string(st.To)]++
		var details []byte
		if i == 0 {
			details = t.Details
		}
		items = append(items, s.statusItem(msg.ID, st.To, m.reached[string(st.To)], m.seq, st.Reason, t.At, details, ttl))
	}
	var events []types.ParameterizedStatement
	if t.Event != nil {
		e := *t.Event
		var err error
		if events, err = s.eventInserts(m, &e, t.At, ttl); err != nil {
			return nil, err
		}
		*t.Event = e
	}
	var alarm []types.ParameterizedStatement
	if t.Alarm != nil {
		alarm = append(alarm, s.alarmStmt(m, *t.Alarm)) // before the _META item is written: it records the alarm
	}
	c := &change{m: m, stmts: []types.ParameterizedStatement{s.metaUpdate(m, readStatus, readSeq, hadSeq, ttl)}}
	for _, it := range items {
		c.stmts = append(c.stmts, s.insert(it))
	}
	c.stmts = append(c.stmts, events...)
	c.stmts = append(c.stmts, alarm...)
	return c, nil
}

// transition reads, prepares and commits t, again when another writer
// changed the message but left it in t.From.
func (s *Store) transition(ctx context.Context, t backends.Transition) (*backends.Message, error) {
	for attempt := 1; ; attempt++ {
		m, err := s.getMeta(ctx, t.ID)
		if err != nil {
			return nil, err
		}
		if !t.Holds(&m.msg) {
			return nil, backends.ErrLockNotAcquired
		}
		c, err := s.prepare(m, t)
		if err != nil {
			return nil, err
		}
		_, err = s.txn(ctx, c.stmts)
		if errors.Is(err, errCondition) && attempt < 10 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &c.m.msg, nil
	}
}

func (s *Store) Transition(ctx context.Context, t backends.Transition) error {
	if err := t.Prepare(time.Now().UTC()); err != nil {
		return err
	}
	if _, err := s.transition(ctx, t); err != nil {
		return fmt.Errorf("message %s %s to %s: %w", t.ID, t.From, t.To, err)
	}
	return nil
}

const lowKey = "!"

// queued reads the QueueIndex entries of a status between two keys, in
// order, up to limit (0: all).
func (s *Store) queued(ctx context.Context, queue, from, to string, limit int) ([]map[string]types.AttributeValue, error) {
	return s.query(ctx, s.queuedStmt(), limit, queuedParams(queue, from, to)...)
}

// queuedStmt reads QueueIndex between two keys of a queue, in order.
func (s *Store) queuedStmt() string {
	return "SELECT * FROM " + s.from("QueueIndex") + ` WHERE "Queue" = ? AND "QueueKey" BETWEEN ? AND ?`
}

func queuedParams(queue, from, to string) []types.AttributeValue {
	return []types.AttributeValue{str(queue), str(from), str(to)}
}

func (s *Store) Claim(ctx context.Context, c backends.Claim) ([]*backends.Message, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Limit <= 0 {
		return nil, nil
	}
	var skip []string
	if c.From == backends.StatusReady {
		var err error
		if skip, err = s.SuspendedBatches(ctx); err != nil {
			return nil, err
		}
	}
	var out []*backends.Message
	ranges := [][2]string{{lowKey, keyTime(c.Now) + "~"}}
	if c.From == backends.StatusReady || c.From == backends.StatusAccepted {
		ranges = nil
		for p := backends.PriorityImmediate; p <= backends.PriorityLow; p++ {
			ranges = append(ranges, [2]string{fmt.Sprintf("%d#", p), fmt.Sprintf("%d#%s~", p, keyTime(c.Now))})
		}
	}
	for _, r := range ranges {
		if len(out) == c.Limit {
			break
		}
		// More candidates than wanted: claimers racing for the first ones
		// move on to the next.
		items, err := s.queued(ctx, string(c.From), r[0], r[1], 4*c.Limit+16+len(skip))
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", c.From, err)
		}
		for _, it := range items {
			if len(out) == c.Limit {
				break
			}
			if b := getS(getM(it, "Attributes"), "Batch"); b != "" && slices.Contains(skip, b) {
				continue
			}
			m, err := s.transition(ctx, c.Move(getS(it, "Id")))
			if errors.Is(err, backends.ErrLockNotAcquired) || errors.Is(err, backends.ErrNotFound) {
				continue // another relay was faster
			}
			if err != nil {
				return out, fmt.Errorf("claim %s: %w", c.From, err)
			}
			out = append(out, m)
		}
	}
	return out, nil
}

func (s *Store) Restore(ctx context.Context, expiredBefore time.Time) (int, error) {
	total := 0
	now := time.Now().UTC()
	for _, st := range backends.WorkingStatuses() {
		items, err := s.queued(ctx, string(st), lowKey, keyTime(expiredBefore), 0)
		if err != nil {
			return total, fmt.Errorf("restore: %w", err)
		}
		for _, it := range items {
			m, err := metaFromItem(it)
			if err != nil {
				return total, err
			}
			if !m.msg.LeaseUntil.Before(expiredBefore) {
				continue
			}
			_, err = s.transition(ctx, backends.RestoreTransition(&m.msg, now))
			if errors.Is(err, backends.ErrLockNotAcquired) {
				continue
			}
			if err != nil {
				return total, fmt.Errorf("restore: %w", err)
			}
			total++
		}
	}
	n, err := s.restoreEvents(ctx, expiredBefore, now)
	return total + n, err
}

func (s *Store) Purge(ctx context.Context, cutoff time.Time, limit int) ([]*backends.Message, error) {
	var out []*backends.Message
	for _, st := range backends.AcknowledgedStatuses() {
		if len(out) >= limit {
			break
		}
		items, err := s.queued(ctx, string(st), lowKey, keyTime(cutoff), limit-len(out))
		if err != nil {
			return out, fmt.Errorf("purge: %w", err)
		}
		for _, it := range items {
			if len(out) >= limit {
				break
			}
			m, err := metaFromItem(it)
			if err != nil {
				return out, err
			}
			if !m.msg.UpdatedAt.Before(cutoff) {
				continue
			}
			ok, err := s.remove(ctx, m, st)
			if err != nil {
				return out, fmt.Errorf("purge: %w", err)
			}
			if ok {
				out = append(out, &m.msg)
			}
		}
	}
	return out, nil
}

// remove deletes a message's items: the _META item first, on condition that
// it is still in status st, then the others (history, events), which are
// of no use without it.
func (s *Store) remove(ctx context.Context, m *meta, st backends.Status) (bool, error) {
	_, err := s.txn(ctx, []types.ParameterizedStatement{stmt("DELETE FROM "+s.from("")+
		` WHERE "Id" = ? AND "Status" = ? AND "Attributes"."Latest" = ?`, str(m.msg.ID), str(metaStatus), str(string(st)))})
	if errors.Is(err, errCondition) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	items, err := s.query(ctx, "SELECT * FROM "+s.from("")+` WHERE "Id" = ?`, 0, str(m.msg.ID))
	if err != nil {
		return true, err
	}
	for _, it := range items {
		sk := getS(it, "Status")
		dels := []types.ParameterizedStatement{stmt("DELETE FROM "+s.from("")+` WHERE "Id" = ? AND "Status" = ?`, str(m.msg.ID), str(sk))}
		if strings.HasPrefix(sk, eventPrefix) {
			ref := eventRef(getS(getM(it, "Attributes"), "EventId"))
			dels = append(dels, stmt("DELETE FROM "+s.from("")+` WHERE "Id" = ? AND "Status" = ?`, str(ref), str(eventRefStatus)))
		}
		if _, err := s.txn(ctx, dels); err != nil {
			return true, err
		}
	}
	return true, nil
}
