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
		"Queue":      str(eventQueue + string(e.State)), "QueueKey": str(eventQueueKey(e)),
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
	for attempt := 1; ; attempt++ {
		m, err := s.getMeta(ctx, e.MessageID)
		if err != nil {
			return fmt.Errorf("add event to %s: %w", e.MessageID, err)
		}
		readSeq, hadSeq := m.seq, m.hasSeq
		now := time.Now().UTC()
		ev := *e
		ttl := s.ttlFor(now)
		inserts, err := s.eventInserts(m, &ev, now, ttl)
		if err != nil {
			return err
		}
		m.seq++
		stmts := append([]types.ParameterizedStatement{s.metaUpdate(m, m.msg.Status, readSeq, hadSeq, nil)}, inserts...)
		_, err = s.txn(ctx, stmts)
		if errors.Is(err, errCondition) && attempt < 10 {
			continue
		}
		if errors.Is(err, errDupItem) {
			return fmt.Errorf("add event to %s: event %s: %w", e.MessageID, e.ID, backends.ErrDuplicate)
		}
		if err != nil {
			return fmt.Errorf("add event to %s: %w", e.MessageID, err)
		}
		*e = ev
		return nil
	}
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
	items, err := s.queued(ctx, eventQueue+string(state), lowKey, "~", limit)
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
	refs, err := s.query(ctx, "SELECT * FROM "+s.from("")+` WHERE "Id" = ? AND "Status" = ?`, 1, str(eventRef(id)), str(eventRefStatus))
	if err != nil {
		return nil, err
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("event %s: %w", id, backends.ErrNotFound)
	}
	a := getM(refs[0], "Attributes")
	items, err := s.query(ctx, "SELECT * FROM "+s.from("")+` WHERE "Id" = ? AND "Status" = ?`, 1, str(getS(a, "MessageId")), str(eventKey(getN(a, "Seq"))))
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("event %s: %w", id, backends.ErrNotFound)
	}
	return eventFromItem(items[0]), nil
}

// eventUpdate writes an event's new state, conditionally on the state it was
// read in.
func (s *Store) eventUpdate(e *backends.Event, readState backends.EventState) types.ParameterizedStatement {
	return stmt("UPDATE "+s.from("")+` SET "Attributes" = ? SET "Queue" = ? SET "QueueKey" = ? WHERE "Id" = ? AND "Status" = ? AND "Attributes"."State" = ?`,
		&types.AttributeValueMemberM{Value: eventAttributes(e)}, str(eventQueue+string(e.State)), str(eventQueueKey(e)),
		str(e.MessageID), str(eventKey(e.Seq)), str(string(readState)))
}

// firstInLine reports whether no earlier event of e's message is
// unacknowledged.
func (s *Store) firstInLine(ctx context.Context, e *backends.Event) (bool, error) {
	events, err := s.Events(ctx, e.MessageID)
	if err != nil {
		return false, err
	}
	for _, other := range events {
		if other.Seq < e.Seq && other.State != backends.EventAcked {
			return false, nil
		}
	}
	return true, nil
}

func (s *Store) ClaimEvents(ctx context.Context, c backends.EventClaim) ([]*backends.Event, error) {
	if c.LeaseUntil.IsZero() || c.Limit <= 0 {
		return nil, fmt.Errorf("claim events: a lease and a limit are required")
	}
	items, err := s.queued(ctx, eventQueue+string(backends.EventPending), lowKey, keyTime(c.Now)+"~", 4*c.Limit+16)
	if err != nil {
		return nil, fmt.Errorf("claim events: %w", err)
	}
	var out []*backends.Event
	taken := map[string]bool{}
	for _, it := range items {
		if len(out) == c.Limit {
			break
		}
		e := eventFromItem(it)
		if taken[e.MessageID] || e.DueAt.After(c.Now) {
			continue
		}
		first, err := s.firstInLine(ctx, e)
		if err != nil {
			return out, fmt.Errorf("claim events: %w", err)
		}
		if !first {
			continue
		}
		ok, err := s.claimEvent(ctx, e, c)
		if err != nil {
			return out, fmt.Errorf("claim events: %w", err)
		}
		if ok {
			taken[e.MessageID] = true
			out = append(out, e)
		}
	}
	return out, nil
}

// claimEvent moves one event to calling and its message to the outcome's
// calling status, in one transaction; false when another relay was faster.
func (s *Store) claimEvent(ctx context.Context, e *backends.Event, c backends.EventClaim) (bool, error) {
	for attempt := 1; ; attempt++ {
		m, err := s.getMeta(ctx, e.MessageID)
		if err != nil {
			return false, err
		}
		ev := *e
		ev.State, ev.LeaseUntil, ev.UpdatedAt = backends.EventCalling, c.LeaseUntil, c.Now
		stmts := []types.ParameterizedStatement{s.eventUpdate(&ev, backends.EventPending)}
		if steps := backends.CallingPath(m.msg.Status, e.Outcome); len(steps) > 0 {
			t := backends.Transition{ID: m.msg.ID, From: m.msg.Status, To: steps[0], At: c.Now, KeepReason: true, Reason: c.Reason, LeaseUntil: c.LeaseUntil}
			for _, st := range steps[1:] {
				t.Then = append(t.Then, backends.Step{To: st, Reason: c.Reason})
			}
			if err := t.Check(); err != nil {
				return false, err
			}
			ch, err := s.prepare(m, t)
			if err != nil {
				return false, err
			}
			stmts = append(stmts, ch.stmts...)
		}
		i, err := s.txn(ctx, stmts)
		if errors.Is(err, errCondition) {
			if i == 0 {
				return false, nil // the event was taken
			}
			if attempt < 10 {
				continue // the message moved meanwhile: read it again
			}
		}
		if err != nil {
			return false, err
		}
		*e = ev
		return true, nil
	}
}

func (s *Store) UpdateEvent(ctx context.Context, u backends.EventUpdate) (*backends.Event, error) {
	if err := u.Check(); err != nil {
		return nil, err
	}
	if u.At.IsZero() {
		u.At = time.Now().UTC()
	}
	for attempt := 1; ; attempt++ {
		e, err := s.getEvent(ctx, u.ID)
		if err != nil {
			return nil, err
		}
		if e.State != u.From {
			return nil, fmt.Errorf("event %s %s to %s: %w", u.ID, u.From, u.To, backends.ErrLockNotAcquired)
		}
		u.Apply(e)
		stmts := []types.ParameterizedStatement{s.eventUpdate(e, u.From)}
		if from, dest, ok := backends.EventMessageMove(e.Outcome, u.To); ok {
			m, err := s.getMeta(ctx, e.MessageID)
			if err != nil {
				return nil, err
			}
			if m.msg.Status == from {
				ch, err := s.prepare(m, backends.Transition{ID: m.msg.ID, From: from, To: dest, At: u.At, KeepReason: true, Reason: u.Reason})
				if err != nil {
					return nil, err
				}
				stmts = append(stmts, ch.stmts...)
			}
		}
		i, err := s.txn(ctx, stmts)
		if errors.Is(err, errCondition) && attempt < 10 {
			if i == 0 {
				continue // read the event again: its state decides
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("event %s %s to %s: %w", u.ID, u.From, u.To, err)
		}
		return e, nil
	}
}

// restoreEvents returns calling events whose lease ran out to pending.
func (s *Store) restoreEvents(ctx context.Context, expiredBefore, now time.Time) (int, error) {
	items, err := s.queued(ctx, eventQueue+string(backends.EventCalling), lowKey, keyTime(expiredBefore), 0)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, it := range items {
		e := eventFromItem(it)
		if !e.LeaseUntil.Before(expiredBefore) {
			continue
		}
		e.State, e.LeaseUntil, e.DueAt, e.UpdatedAt = backends.EventPending, time.Time{}, now, now
		_, err := s.txn(ctx, []types.ParameterizedStatement{s.eventUpdate(e, backends.EventCalling)})
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
