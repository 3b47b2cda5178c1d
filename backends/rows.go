package backends

import (
	"fmt"
	"maps"
	"slices"
	"time"
)

// Rows holds in memory the rows a store's transaction has read and locked,
// and what its moves change in them, so that the store writes them at the
// transaction's end with a few statements whatever the number of messages.
// It is the EventTx of the event rules: a SQL store embeds it and feeds it
// from its own reads (Adopt, AdoptEvents), then writes the dirty rows with
// its own statements.
type Rows struct {
	Messages map[string]*Message
	Events   map[string]*Event
	// DirtyMessages and DirtyEvents are the ids Move and PutEvent changed,
	// in the order of the changes, an id once or more.
	DirtyMessages []string
	DirtyEvents   []string
	// Envelopes holds the messages whose envelope a move set (rows taken
	// over from the seed layout): only theirs is written again.
	Envelopes map[string]bool
	// NewEvents are the events the moves add, prepared but not numbered:
	// the store numbers them after their messages' last ones.
	NewEvents []*Event
	Alarms    []Alarm
	Changes   Changes
}

var _ EventTx = (*Rows)(nil)

// NewRows returns an empty Rows.
func NewRows() Rows {
	return Rows{Messages: map[string]*Message{}, Events: map[string]*Event{}}
}

// Held returns r: the shared steps (ApplyGroup, ClaimHeldEvents) read the
// rows a store's transaction holds through it.
func (r *Rows) Held() *Rows { return r }

// Adopt takes messages the transaction has locked.
func (r *Rows) Adopt(msgs []*Message) {
	for _, m := range msgs {
		r.Messages[m.ID] = m
	}
}

// AdoptEvents takes events the transaction has locked.
func (r *Rows) AdoptEvents(events []*Event) {
	for _, e := range events {
		r.Events[e.ID] = e
	}
}

// Move applies t to its message in memory: ErrNotFound when the message is
// not among the locked ones, ErrLockNotAcquired when it is not in t.From.
// The history rows, the counts, the alarm and the event go with it.
func (r *Rows) Move(t Transition) error {
	m, ok := r.Messages[t.ID]
	if !ok {
		return ErrNotFound
	}
	if !t.Holds(m) {
		return ErrLockNotAcquired
	}
	final := t.Final()
	t.Apply(m, final)
	m.Version++
	r.DirtyMessages = append(r.DirtyMessages, m.ID)
	if t.Envelope != nil {
		if r.Envelopes == nil {
			r.Envelopes = map[string]bool{}
		}
		r.Envelopes[m.ID] = true
	}
	r.Changes.Moved(&t)
	for i, st := range t.Steps() {
		var details []byte
		if i == 0 {
			details = t.Details
		}
		r.Changes.Add(t.ID, st.To, st.Reason, t.At, details)
	}
	if t.Alarm != nil {
		r.Alarms = append(r.Alarms, *t.Alarm)
	}
	if t.Event != nil {
		if err := t.Event.Prepare(t.ID, t.At); err != nil {
			return err
		}
		r.NewEvents = append(r.NewEvents, t.Event)
	}
	return nil
}

func (r *Rows) Event(id string) (*Event, error) {
	e, ok := r.Events[id]
	if !ok {
		return nil, fmt.Errorf("event %s: %w", id, ErrNotFound)
	}
	return e, nil
}

func (r *Rows) PutEvent(_, e *Event) error {
	r.Events[e.ID] = e
	r.DirtyEvents = append(r.DirtyEvents, e.ID)
	return nil
}

func (r *Rows) Status(id string) (Status, error) {
	m, ok := r.Messages[id]
	if !ok {
		return "", fmt.Errorf("message %s: %w", id, ErrNotFound)
	}
	return m.Status, nil
}

// SortedIDs returns ids once each, sorted: the order every store takes its
// row locks in, so that two transactions never wait on each other in a
// cycle.
func SortedIDs(ids []string) []string {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	return slices.Compact(ids)
}

// HistoryRow is a history row a transaction adds to a message.
type HistoryRow struct {
	MessageID string
	HistoryEntry
}

// Changes gathers what a transaction writes beside the message rows: the
// history rows, the moves between statuses, merged per status, and the
// activities, for the counters. A store writes them last, so that every
// transaction takes the counters' locks after its message rows', in the
// order of the statuses, then of the activities, and two never wait on
// each other in a cycle.
type Changes struct {
	History []HistoryRow
	delta   map[Status]int
	did     map[Activity]int
}

// Created counts m, a message created, with its first history row.
func (c *Changes) Created(m *Message) {
	c.Add(m.ID, m.Status, m.Reason, m.CreatedAt, nil)
	c.Count(m.Status, 1)
	c.Did(ActivityAccepted)
}

// Moved counts t's message leaving t.From for where t leaves it, and what
// t does (Transition.Activities).
func (c *Changes) Moved(t *Transition) {
	c.Count(t.From, -1)
	c.Count(t.Final(), 1)
	for _, a := range t.Activities() {
		c.Did(a)
	}
}

// Did counts one more of activity a.
func (c *Changes) Did(a Activity) {
	if c.did == nil {
		c.did = map[Activity]int{}
	}
	c.did[a]++
}

// Add adds a history row.
func (c *Changes) Add(id string, st Status, reason string, at time.Time, details []byte) {
	c.History = append(c.History, HistoryRow{id, HistoryEntry{Status: st, Reason: reason, At: at, Details: details}})
}

// Count adds d messages to status st.
func (c *Changes) Count(st Status, d int) {
	if c.delta == nil {
		c.delta = map[Status]int{}
	}
	c.delta[st] += d
}

// Take returns the history rows and the statuses whose count changed, in
// order, with their changes, and forgets them.
func (c *Changes) Take() (history []HistoryRow, statuses []Status, deltas []int) {
	history, c.History = c.History, nil
	for _, st := range slices.Sorted(maps.Keys(c.delta)) {
		if d := c.delta[st]; d != 0 {
			statuses, deltas = append(statuses, st), append(deltas, d)
		}
	}
	clear(c.delta)
	return history, statuses, deltas
}

// TakeActivities returns the activities counted, in order, with their
// counts, and forgets them.
func (c *Changes) TakeActivities() (acts []Activity, ns []int) {
	for _, a := range slices.Sorted(maps.Keys(c.did)) {
		acts, ns = append(acts, a), append(ns, c.did[a])
	}
	clear(c.did)
	return acts, ns
}

// Purged returns the ids of msgs, which a transaction deletes, and the
// changes of the counts they leave.
func Purged(msgs []*Message) ([]string, *Changes) {
	ids := make([]string, len(msgs))
	var h Changes
	for i, m := range msgs {
		ids[i] = m.ID
		h.Count(m.Status, -1)
	}
	return ids, &h
}
