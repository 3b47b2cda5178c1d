package backends

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/genropy/postino/outcome"
)

// Transition moves one message from one status to another, conditionally on
// its current status, and appends a history row in the same transaction.
type Transition struct {
	ID   string
	From Status
	To   Status
	// At is when the change happens; zero means now.
	At time.Time
	// Reason becomes the message's reason and the history row's.
	Reason string
	// KeepReason leaves the message's reason as it was and only writes
	// Reason into the history (restore and hand-back do this).
	KeepReason bool
	Details    json.RawMessage
	// LeaseUntil is required when To is a working status.
	LeaseUntil time.Time
	// Held, when set, is the lease the mover claimed the message under
	// (see Holds): the move is refused while the message holds another.
	Held time.Time
	// DueAt, when not zero, sets the message's due time.
	DueAt time.Time
	// AddAttempt counts one more delivery attempt.
	AddAttempt bool
	// Route, when not empty, records the route chosen at intake.
	Route string
	// Results, when not nil, replaces the recipients' results.
	Results []outcome.Recipient
	// Envelope, when not nil, replaces the message's envelope: a row taken
	// over from the seed layout, which kept its envelope in a file, gets it
	// at intake.
	Envelope *Envelope
	// Event, when set, is recorded in the same transaction (see Event for
	// the fields the store fills in).
	Event *Event
	// Alarm, when set, is set on the message in the same transaction (its
	// MessageID is the message's): a check owed to what the move starts.
	Alarm *Alarm
	// Then carries the message on through more statuses in the same
	// transaction, each step with its history row; the message keeps the
	// reason of the first move. With no plugin to call, SENT goes through
	// CALLING-SENT-CALLBACK to SENT-ACKNOWLEDGED at once.
	Then []Step
}

// Step is one more move of a Transition.
type Step struct {
	To     Status
	Reason string
}

// Final is the status a transition leaves the message in.
func (t *Transition) Final() Status {
	if len(t.Then) > 0 {
		return t.Then[len(t.Then)-1].To
	}
	return t.To
}

// Steps lists every move of the transition with the reason its history row
// carries: the first move's details go with its own row.
func (t *Transition) Steps() []Step {
	return append([]Step{{To: t.To, Reason: t.Reason}}, t.Then...)
}

// Apply changes m as t says, to the status to: t.To, or the end of its
// chain when a store writes the chain at once. The store keeps its own
// version, indexes and history.
func (t *Transition) Apply(m *Message, to Status) {
	m.Status = to
	if !t.KeepReason {
		m.Reason = t.Reason
	}
	m.UpdatedAt = t.At
	m.LeaseUntil = time.Time{}
	if to.Working() {
		m.LeaseUntil = t.LeaseUntil
	}
	if !t.DueAt.IsZero() {
		m.DueAt = t.DueAt
	}
	if t.AddAttempt {
		m.Attempts++
	}
	if t.Route != "" {
		m.Route = t.Route
	}
	if t.Results != nil {
		m.Results = t.Results
	}
	if t.Envelope != nil {
		m.Envelope = *t.Envelope
	}
}

// Check validates every move of the transition.
func (t *Transition) Check() error {
	if err := CheckTransition(t.From, t.To); err != nil {
		return err
	}
	prev := t.To
	for _, s := range t.Then {
		if err := CheckTransition(prev, s.To); err != nil {
			return err
		}
		prev = s.To
	}
	if prev.Working() && t.LeaseUntil.IsZero() {
		return fmt.Errorf("moving to %s needs a lease", prev)
	}
	if t.Alarm != nil {
		t.Alarm.MessageID = t.ID
		return t.Alarm.Check()
	}
	return nil
}

// Prepare checks t before a store looks at anything, and dates it now
// unless the caller said when.
func (t *Transition) Prepare(now time.Time) error {
	if err := t.Check(); err != nil {
		return fmt.Errorf("message %s: %w", t.ID, err)
	}
	if t.At.IsZero() {
		t.At = now
	}
	return nil
}

// Path is the transition that walks a message from a status along steps
// (from CallingPath, say), with reason in each history row and the lease
// a working status needs.
func Path(id string, from Status, steps []Status, at, lease time.Time, reason string) Transition {
	t := Transition{ID: id, From: from, To: steps[0], At: at, KeepReason: true, Reason: reason, LeaseUntil: lease}
	for _, st := range steps[1:] {
		t.Then = append(t.Then, Step{To: st, Reason: reason})
	}
	return t
}

// Claim takes up to Limit messages in From and moves them to To (a working
// status) under a lease, atomically: two claimers never get the same message.
// Messages come in order of priority, then QueueTime (the due time in
// READY), then age; a message whose DueAt is after Now is not taken, and
// neither, when From is READY, is a message of a suspended batch.
type Claim struct {
	From, To   Status
	Now        time.Time
	LeaseUntil time.Time
	Limit      int
	// Reason is written into the history, for instance who claimed.
	Reason string
}

// Check validates a claim before the store looks at anything.
func (c *Claim) Check() error {
	if err := CheckTransition(c.From, c.To); err != nil {
		return err
	}
	if !c.To.Working() || c.LeaseUntil.IsZero() {
		return fmt.Errorf("claim %s to %s: the target must be a working status with a lease", c.From, c.To)
	}
	return nil
}

// Move is the transition that claims one message.
func (c *Claim) Move(id string) Transition {
	return Transition{ID: id, From: c.From, To: c.To, At: c.Now, Reason: c.Reason, KeepReason: true, LeaseUntil: c.LeaseUntil}
}

// RestoreTransition returns m, whose lease ran out, to the status before
// its working one, keeping its reason and attempts; the history says why.
// It holds the lease that ran out: a lease renewed since is left alone.
func RestoreTransition(m *Message, at time.Time) Transition {
	prev := m.Status.Previous()
	return Transition{ID: m.ID, From: m.Status, To: prev, At: at, KeepReason: true, Held: m.LeaseUntil,
		Reason: fmt.Sprintf("lease of %s expired at %s; returned to %s", m.Status, m.LeaseUntil.UTC().Format(time.RFC3339), prev)}
}
