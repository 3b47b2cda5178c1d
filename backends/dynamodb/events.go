package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// An event lives beside its message (sort key EVENT#seq); a small item
// (Id _EVENT#<event id>) points at it, so that it is found by its id.
const (
	eventRefPrefix = "_EVENT#"
	eventRefStatus = "_EVENTREF"
)

func eventRef(id string) string { return eventRefPrefix + id }

// eventItem is the item of an event.
func eventItem(e *backends.Event, ttl *int64) map[string]types.AttributeValue {
	item := map[string]types.AttributeValue{
		"Id": str(e.MessageID), "Status": str(eventKey(e.Seq)),
		"Attributes": &types.AttributeValueMemberM{Value: eventAttributes(e)},
		"Queue":      str(eventQueueOf(e)), "QueueKey": str(eventQueueKey(e)),
	}
	if ttl != nil {
		item["TTL"] = num(*ttl)
	}
	return item
}

// eventInserts numbers a new event of message m and makes its inserts; m's
// event counter moves on, to be written with m.
func (s *Store) eventInserts(m *meta, e *backends.Event, at time.Time, ttl *int64) ([]types.ParameterizedStatement, error) {
	if err := e.Prepare(m.msg.ID, at); err != nil {
		return nil, err
	}
	m.eventSeq++
	e.Seq = m.eventSeq
	ref := map[string]types.AttributeValue{"Id": str(eventRef(e.ID)), "Status": str(eventRefStatus),
		"Attributes": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"MessageId": str(e.MessageID), "Seq": num(e.Seq)}}}
	if ttl != nil {
		ref["TTL"] = num(*ttl)
	}
	return []types.ParameterizedStatement{s.insert(eventItem(e, ttl)), s.insert(ref)}, nil
}

func (s *Store) AddEvent(ctx context.Context, e *backends.Event) error {
	var ev backends.Event
	err := s.metaChange(ctx, e.MessageID, func(m *meta) ([]types.ParameterizedStatement, error) {
		now := time.Now().UTC()
		ev = *e
		return s.eventInserts(m, &ev, now, s.ttlFor(now))
	})
	if errors.Is(err, errDupItem) {
		return fmt.Errorf("add event to %s: event %s: %w", e.MessageID, e.ID, backends.ErrDuplicate)
	}
	if err != nil {
		return fmt.Errorf("add event to %s: %w", e.MessageID, err)
	}
	*e = ev
	return nil
}

func (s *Store) Events(ctx context.Context, messageID string) ([]*backends.Event, error) {
	items, err := s.query(ctx, "SELECT * FROM "+s.from("")+` WHERE "Id" = ? AND begins_with("Status", ?)`, 0, str(messageID), str(eventPrefix))
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		if _, err := s.getMeta(ctx, messageID); err != nil {
			return nil, err
		}
	}
	out := make([]*backends.Event, len(items))
	for i, it := range items {
		out[i] = eventFromItem(it)
	}
	return out, nil
}

func (s *Store) EventsByState(ctx context.Context, state backends.EventState, limit int) ([]*backends.Event, error) {
	items, err := s.queuedShards(ctx, eventQueue+string(state), lowKey, "~", limit)
	if err != nil {
		return nil, err
	}
	var out []*backends.Event
	for _, it := range items {
		if len(out) == limit {
			break
		}
		out = append(out, eventFromItem(it))
	}
	return out, nil
}

// getEvent finds an event by its id.
func (s *Store) getEvent(ctx context.Context, id string) (*backends.Event, error) {
	events, err := s.readEvents(ctx, []string{id})
	if err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, fmt.Errorf("event %s: %w", id, backends.ErrNotFound)
	}
	return events[0], nil
}

// eventUpdate writes an event's new state, e, conditionally on the state it
// was read in, before, and when calling on the lease it was read under: a
// restore or an update that read the lease before a renewal fails its
// condition and reads the event again.
func (s *Store) eventUpdate(e, before *backends.Event) types.ParameterizedStatement {
	text := "UPDATE " + s.from("") + ` SET "Attributes" = ? SET "Queue" = ? SET "QueueKey" = ? WHERE "Id" = ? AND "Status" = ? AND "Attributes"."State" = ?`
	params := []types.AttributeValue{&types.AttributeValueMemberM{Value: eventAttributes(e)}, str(eventQueueOf(e)), str(eventQueueKey(e)),
		str(e.MessageID), str(eventKey(e.Seq)), str(string(before.State))}
	if before.State == backends.EventCalling {
		text += ` AND "Attributes"."LeaseUntil" = ?`
		params = append(params, tm(before.LeaseUntil))
	}
	return stmt(text, params...)
}

// head is the id of the earliest unacknowledged event of a message, the
// only one that may be called; empty when all are acknowledged.
func (s *Store) head(ctx context.Context, messageID string) (string, error) {
	events, err := s.Events(ctx, messageID)
	if err != nil {
		return "", err
	}
	for _, e := range events {
		if e.State != backends.EventAcked {
			return e.ID, nil
		}
	}
	return "", nil
}

// ClaimEvents reads the due pending events in order, the shards merged, and claims those
// first in line for their message, until c.Limit are claimed. The events
// waiting behind an earlier one are passed over, however many: stopping
// after a fixed number of candidates would let waiting ones fill every
// claim and keep the first in line, due later, from ever being claimed.
// Each message's events are read once.
func (s *Store) ClaimEvents(ctx context.Context, c backends.EventClaim) ([]*backends.Event, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	var out []*backends.Event
	heads := map[string]string{} // by message, once looked at; "" once claimed
	claim := func(it map[string]types.AttributeValue) error {
		e := eventFromItem(it)
		if e.DueAt.After(c.Now) {
			return nil
		}
		h, ok := heads[e.MessageID]
		if !ok {
			var err error
			if h, err = s.head(ctx, e.MessageID); errors.Is(err, backends.ErrNotFound) {
				h = "" // the message is being purged: its events go with it
			} else if err != nil {
				return err
			}
		}
		if e.ID != h {
			heads[e.MessageID] = h
			return nil
		}
		claimed, err := s.claimEvent(ctx, e, c)
		if errors.Is(err, backends.ErrNotFound) {
			err = nil // as above
		}
		if err != nil || claimed == nil {
			return err
		}
		heads[e.MessageID] = "" // one event per message at a time
		out = append(out, claimed)
		return nil
	}
	err := s.eachMerged(ctx, eventQueue+string(backends.EventPending), lowKey, keyTime(c.Now)+"~",
		func(it map[string]types.AttributeValue) (bool, error) {
			if err := claim(it); err != nil {
				return false, err
			}
			return len(out) < c.Limit, nil
		})
	if err != nil {
		return out, fmt.Errorf("claim events: %w", err)
	}
	return out, nil
}

// claimEvent claims e as backends.ClaimEvent does, in one transaction; nil
// when another relay was faster.
func (s *Store) claimEvent(ctx context.Context, e *backends.Event, c backends.EventClaim) (*backends.Event, error) {
	for attempt := 1; ; attempt++ {
		etx := &eventTx{ctx: ctx, s: s}
		claimed, err := backends.ClaimEvent(etx, e, c)
		if err != nil {
			return nil, err
		}
		i, err := s.txn(ctx, etx.stmts)
		if errors.Is(err, errCondition) {
			if i == 0 {
				return nil, nil // the event was taken
			}
			if attempt < 10 {
				continue // the message moved meanwhile: read it again
			}
		}
		if err != nil {
			return nil, err
		}
		return claimed, nil
	}
}

func (s *Store) UpdateEvent(ctx context.Context, u backends.EventUpdate) (*backends.Event, error) {
	if err := u.Prepare(time.Now().UTC()); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		etx := &eventTx{ctx: ctx, s: s}
		e, err := backends.UpdateEvent(etx, u)
		if err == nil {
			_, err = s.txn(ctx, etx.stmts)
			if errors.Is(err, errCondition) && attempt < 10 {
				continue // the event or its message moved meanwhile: read them again
			}
		}
		if err != nil {
			return nil, fmt.Errorf("event %s %s to %s: %w", u.ID, u.From, u.To, err)
		}
		return e, nil
	}
}

// eventTx gathers the statements of an event rule, to run them as one
// transaction, each conditional on the item as it was read.
type eventTx struct {
	ctx   context.Context
	s     *Store
	m     *meta // the message Status read, for Move
	stmts []types.ParameterizedStatement
}

func (t *eventTx) Event(id string) (*backends.Event, error) { return t.s.getEvent(t.ctx, id) }

func (t *eventTx) PutEvent(before, after *backends.Event) error {
	t.stmts = append(t.stmts, t.s.eventUpdate(after, before))
	return nil
}

func (t *eventTx) Status(id string) (backends.Status, error) {
	m, err := t.s.getMeta(t.ctx, id)
	if err != nil {
		return "", err
	}
	t.m = m
	return m.msg.Status, nil
}

func (t *eventTx) Move(tr backends.Transition) error {
	ch, err := t.s.prepare(t.m, tr)
	if err != nil {
		return err
	}
	var moved backends.Changes
	moved.Moved(&tr)
	counters, err := t.s.counterStmts(t.ctx, &moved)
	t.stmts = append(append(t.stmts, ch.stmts...), counters...)
	return err
}

// restoreEvents returns calling events whose lease ran out to pending.
func (s *Store) restoreEvents(ctx context.Context, expiredBefore, now time.Time) (int, error) {
	items, err := s.queuedShards(ctx, eventQueue+string(backends.EventCalling), lowKey, keyTime(expiredBefore), 0)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, it := range items {
		before := eventFromItem(it)
		if !before.LeaseUntil.Before(expiredBefore) {
			continue
		}
		e := *before
		backends.RestoreEvent(&e, now)
		_, err := s.txn(ctx, []types.ParameterizedStatement{s.eventUpdate(&e, before)})
		if errors.Is(err, errCondition) {
			continue
		}
		if err != nil {
			return total, err
		}
		total++
	}
	return total, nil
}
