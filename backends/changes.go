package backends

import (
	"maps"
	"slices"
	"time"
)

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
