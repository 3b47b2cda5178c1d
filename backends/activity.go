package backends

import (
	"maps"
	"slices"
	"time"
)

// Activity is a kind of thing that happens to messages, which every store
// counts by the minute in the transaction of the change that makes it
// (Throughput): so the counts survive a restart, and every relay sharing
// the store reads the same. The names are the dashboard's.
type Activity string

const (
	// ActivityAccepted: a message was created, by SMTP or from an app's
	// submissions table alike.
	ActivityAccepted Activity = "ACCEPTED"
	// ActivitySent: a message reached SENT.
	ActivitySent Activity = "SENT"
	// ActivityDeferred: a delivery attempt ended back in READY for a later
	// one (PROCESSING to READY counting the attempt); not a lease that ran
	// out, nor an attempt handed back before anything was tried.
	ActivityDeferred Activity = "DEFERRED"
	// ActivityFailed: a message reached FAILED: refused for good, expired,
	// or cancelled.
	ActivityFailed Activity = "FAILED"
	// ActivityInvalid: a message reached INVALID: it could not be prepared.
	ActivityInvalid Activity = "INVALID"
	// ActivityBounced: a message reached BOUNCED (when its bounce's event
	// moves it).
	ActivityBounced Activity = "BOUNCED"
	// ActivitySuppressed: a message reached SUPPRESSED: every recipient
	// was on the suppression list.
	ActivitySuppressed Activity = "SUPPRESSED"
)

// Activities lists every activity a store counts.
func Activities() []Activity {
	return []Activity{ActivityAccepted, ActivitySent, ActivityDeferred, ActivityFailed, ActivityInvalid, ActivityBounced, ActivitySuppressed}
}

// MinutesKept is how long the counts per minute are kept: the relay's
// housekeeping prunes the older ones (Throughput.PruneMinutes).
const MinutesKept = 2 * time.Hour

// Activities returns what t does that the counts per minute count: a
// deferral, or each outcome one of its steps reaches. An outcome reached
// again from its own calling status (a plugin call that failed, a lease
// that ran out) or kept (a seed row taken over) is not counted again.
func (t *Transition) Activities() []Activity {
	var out []Activity
	if t.From == StatusProcessing && t.To == StatusReady && t.AddAttempt {
		out = append(out, ActivityDeferred)
	}
	from := t.From
	for _, st := range t.Steps() {
		switch st.To {
		case StatusSent, StatusFailed, StatusInvalid, StatusBounced, StatusSuppressed:
			if from != st.To && from.Previous() != st.To {
				out = append(out, Activity(st.To))
			}
		}
		from = st.To
	}
	return out
}

// Minute is what a store counted in one minute.
type Minute struct {
	// At is the minute's start, UTC.
	At     time.Time
	Counts map[Activity]int
}

// MinuteOf is the minute a change made at t counts in. Stores count by
// their own clock when they write, not by the time a caller gives.
func MinuteOf(t time.Time) time.Time { return t.UTC().Truncate(time.Minute) }

// Tally gathers counts per minute as a store reads them, in any order and
// in parts (shards of one minute add up).
type Tally map[time.Time]map[Activity]int

// Add counts n of a in the minute at.
func (t Tally) Add(at time.Time, a Activity, n int) {
	at = MinuteOf(at)
	if t[at] == nil {
		t[at] = map[Activity]int{}
	}
	t[at][a] += n
}

// Minutes returns the minutes that counted anything, oldest first.
func (t Tally) Minutes() []Minute {
	out := []Minute{}
	for _, at := range slices.SortedFunc(maps.Keys(t), time.Time.Compare) {
		counts := map[Activity]int{}
		for a, n := range t[at] {
			if n != 0 {
				counts[a] = n
			}
		}
		if len(counts) > 0 {
			out = append(out, Minute{At: at, Counts: counts})
		}
	}
	return out
}
