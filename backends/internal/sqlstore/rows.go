package sqlstore

import (
	"fmt"
	"slices"

	"github.com/genropy/postino/backends"
)

// Rows holds in memory the rows a store's transaction has read and locked,
// and what its moves change in them, so that the store writes them at the
// transaction's end with a few statements whatever the number of messages.
// It is the EventTx of the event rules: a SQL store embeds it and feeds it
// from its own reads (Adopt, AdoptEvents), then writes the dirty rows with
// its own statements.
type Rows struct {
	Messages map[string]*backends.Message
	Events   map[string]*backends.Event
	// DirtyMessages and DirtyEvents are the ids Move and PutEvent changed,
	// in the order of the changes, an id once or more.
	DirtyMessages []string
	DirtyEvents   []string
	// Envelopes holds the messages whose envelope a move set (rows taken
	// over from the seed layout): only theirs is written again.
	Envelopes map[string]bool
	// NewEvents are the events the moves add, prepared but not numbered:
	// the store numbers them after their messages' last ones.
	NewEvents []*backends.Event
	Alarms    []backends.Alarm
	Changes   backends.Changes
}

var _ backends.EventTx = (*Rows)(nil)

// NewRows returns an empty Rows.
func NewRows() Rows {
	return Rows{Messages: map[string]*backends.Message{}, Events: map[string]*backends.Event{}}
}

// Held returns r: the shared steps (ApplyGroup, ClaimHeldEvents) read the
// rows a store's transaction holds through it.
func (r *Rows) Held() *Rows { return r }

// Adopt takes messages the transaction has locked.
func (r *Rows) Adopt(msgs []*backends.Message) {
	for _, m := range msgs {
		r.Messages[m.ID] = m
	}
}

// AdoptEvents takes events the transaction has locked.
func (r *Rows) AdoptEvents(events []*backends.Event) {
	for _, e := range events {
		r.Events[e.ID] = e
	}
}

// Move applies t to its message in memory: ErrNotFound when the message is
// not among the locked ones, ErrLockNotAcquired when it is not in t.From.
// The history rows, the counts, the alarm and the event go with it.
func (r *Rows) Move(t backends.Transition) error {
	m, ok := r.Messages[t.ID]
	if !ok {
		return backends.ErrNotFound
	}
	if !t.Holds(m) {
		return backends.ErrLockNotAcquired
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

func (r *Rows) Event(id string) (*backends.Event, error) {
	e, ok := r.Events[id]
	if !ok {
		return nil, fmt.Errorf("event %s: %w", id, backends.ErrNotFound)
	}
	return e, nil
}

func (r *Rows) PutEvent(_, e *backends.Event) error {
	r.Events[e.ID] = e
	r.DirtyEvents = append(r.DirtyEvents, e.ID)
	return nil
}

func (r *Rows) Status(id string) (backends.Status, error) {
	m, ok := r.Messages[id]
	if !ok {
		return "", fmt.Errorf("message %s: %w", id, backends.ErrNotFound)
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

// Purged returns the ids of msgs, which a transaction deletes, and the
// changes of the counts they leave.
func Purged(msgs []*backends.Message) ([]string, *backends.Changes) {
	ids := make([]string, len(msgs))
	var h backends.Changes
	for i, m := range msgs {
		ids[i] = m.ID
		h.Count(m.Status, -1)
	}
	return ids, &h
}
