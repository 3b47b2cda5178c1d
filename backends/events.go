package backends

import (
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/google/uuid"
)

// NewEventID makes an event id: a time-ordered UUID.
func NewEventID() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// Prepare readies a new event of message messageID, recorded at at: it must
// have an id; the rest defaults to a pending event due when it happened.
func (e *Event) Prepare(messageID string, at time.Time) error {
	if e.ID == "" {
		return fmt.Errorf("an event of %s has no id", messageID)
	}
	e.MessageID = messageID
	if e.At.IsZero() {
		e.At = at
	}
	if e.State == "" {
		e.State = EventPending
	}
	if e.DueAt.IsZero() {
		e.DueAt = e.At
	}
	e.UpdatedAt = at
	return nil
}

// OutcomeEvent is the event of a message moving from a status to an
// outcome. Its details tell plugins the previous status and what details
// adds (a delivery attempt's results, a bounce, a PEC receipt), by their JSON
// names; details must hold only JSON-encodable values.
func OutcomeEvent(from, outcome Status, reason string, details map[string]any) *Event {
	d := map[string]any{"previous_status": from}
	maps.Copy(d, details)
	b, err := json.Marshal(d)
	if err != nil {
		panic(fmt.Sprintf("backends: event details of %s are not JSON: %v", outcome, err))
	}
	return &Event{ID: NewEventID(), Outcome: string(outcome), Reason: reason, Details: b}
}

// EventState is where an event stands in its dispatch to the plugins.
type EventState string

const (
	EventPending EventState = "pending" // waiting for its turn or its next try
	EventCalling EventState = "calling" // claimed: plugins are being called
	EventAcked   EventState = "acked"   // every plugin that wants it acknowledged
	EventParked  EventState = "parked"  // its tries ran out; waits for a replay
)

// Event is one outcome told to the app's code: written in the same
// transaction as the change that makes it, dispatched at least once, in
// order per message.
type Event struct {
	// ID is stable across retries, so that plugins can drop duplicates.
	ID string `json:"event_id"`
	// MessageID is the outbox id of the message (its X-Genro-Mail-ID).
	MessageID string `json:"message_id"`
	// Seq orders the events of one message; the store assigns it.
	Seq int64 `json:"seq"`
	// Outcome is a status the message reaches (SENT, FAILED, INVALID, …)
	// or a notice that changes no status (a delay, a complaint).
	Outcome string          `json:"outcome"`
	Reason  string          `json:"reason,omitempty"`
	At      time.Time       `json:"at"`
	Details json.RawMessage `json:"details,omitempty"`

	State    EventState `json:"state"`
	Attempts int        `json:"attempts"`
	// DueAt is when a pending event may be claimed.
	DueAt      time.Time `json:"due_at"`
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	LastError  string    `json:"last_error,omitempty"`
	// Acked names the plugins that acknowledged it, so that a retry calls
	// only the others.
	Acked     []string  `json:"acked,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// CallbackStatuses returns the statuses a message goes through while the
// plugins are told of an outcome; ok is false for a notice, which moves no
// status.
func CallbackStatuses(outcome string) (calling, acked Status, ok bool) {
	for _, c := range callbacks() {
		if Status(outcome) == c.outcome {
			return c.calling, c.acked, true
		}
	}
	return "", "", false
}

// CallingPath is the way a message goes to the calling status of an
// outcome from where it is: straight from the outcome's own status, or
// through it from an acknowledged one, or from the calling status itself,
// where an earlier claim of the event left it (the event's lease ran out
// and it was restored first): back through the outcome, so that the message
// takes the new claim's lease, and the claim holds the event and its message
// under one lease. Nil when the message cannot get there.
func CallingPath(from Status, outcome string) []Status {
	calling, _, ok := CallbackStatuses(outcome)
	if !ok {
		return nil
	}
	if from == Status(outcome) {
		return []Status{calling}
	}
	if CanTransition(from, Status(outcome)) {
		return []Status{Status(outcome), calling}
	}
	return nil
}

// EventClaim takes up to Limit pending events that are due and first in
// line for their message (no earlier event of the message is unacknowledged),
// and moves them to calling under a lease, atomically. Each claimed event's
// message moves to the calling status of the outcome, with Reason in its
// history.
type EventClaim struct {
	Now        time.Time
	LeaseUntil time.Time
	Limit      int
	Reason     string
}

// Check validates a claim before the store looks at anything.
func (c *EventClaim) Check() error {
	if c.LeaseUntil.IsZero() || c.Limit <= 0 {
		return fmt.Errorf("claim events: a lease and a limit are required")
	}
	return nil
}

// EventUpdate moves one event from one state to another, conditionally on
// its current state.
type EventUpdate struct {
	ID   string
	From EventState
	To   EventState
	At   time.Time
	// Acked, when not nil, replaces the list of plugins that acknowledged.
	Acked []string
	// AddAttempt counts one more try.
	AddAttempt bool
	// DueAt, when not zero, is when a pending event may be claimed again.
	DueAt     time.Time
	LastError string
	// LeaseUntil is required when To is calling.
	LeaseUntil time.Time
	// Held, when set, is the lease the updater holds the calling event
	// under (its claim's, or its last renewal's): the update is refused
	// while the event is under another, so that a dispatcher whose lease
	// ran out cannot write over the event once another has claimed it.
	Held time.Time
	// Reason goes into the message's history when the update moves it: to
	// the acknowledged status when the event is acked, back to the outcome's
	// status when a calling event returns to pending or is parked.
	Reason string
}

// Check validates an update before the store looks at anything.
func (u *EventUpdate) Check() error {
	ok := false
	switch u.From {
	case EventPending:
		ok = u.To == EventCalling || u.To == EventParked
	case EventCalling:
		ok = u.To == EventAcked || u.To == EventPending || u.To == EventParked
	case EventParked:
		ok = u.To == EventPending
	}
	if !ok {
		return fmt.Errorf("%w: event %s to %s", ErrInvalidTransition, u.From, u.To)
	}
	if u.To == EventCalling && u.LeaseUntil.IsZero() {
		return fmt.Errorf("event %s: calling needs a lease", u.ID)
	}
	return nil
}

// Prepare checks u before a store looks at anything, and dates it now
// unless the caller said when.
func (u *EventUpdate) Prepare(now time.Time) error {
	if err := u.Check(); err != nil {
		return err
	}
	if u.At.IsZero() {
		u.At = now
	}
	return nil
}

// Apply makes the update to e, which the store has read in state u.From.
func (u *EventUpdate) Apply(e *Event) {
	e.State, e.UpdatedAt, e.LeaseUntil = u.To, u.At, time.Time{}
	if u.To == EventCalling {
		e.LeaseUntil = u.LeaseUntil
	}
	if u.Acked != nil {
		e.Acked = u.Acked
	}
	if u.AddAttempt {
		e.Attempts++
	}
	if !u.DueAt.IsZero() {
		e.DueAt = u.DueAt
	} else if u.To == EventPending {
		e.DueAt = u.At
	}
	if u.LastError != "" {
		e.LastError = u.LastError
	}
}

// RestoreEvent returns e, calling when its lease ran out, to pending and
// due at once; its message returns on its own lease (RestoreTransition).
func RestoreEvent(e *Event, now time.Time) {
	u := EventUpdate{ID: e.ID, From: EventCalling, To: EventPending, At: now}
	u.Apply(e)
}

// EventMessageMove is the move an event update makes its message do, if
// any: from the calling status to the acknowledged one on acked, back to the
// outcome's status on pending or parked.
func EventMessageMove(outcome string, to EventState) (from, dest Status, ok bool) {
	calling, acked, isStatus := CallbackStatuses(outcome)
	if !isStatus {
		return "", "", false
	}
	switch to {
	case EventAcked:
		return calling, acked, true
	case EventPending, EventParked:
		return calling, Status(outcome), true
	}
	return "", "", false
}

// EventTx is a store's transaction as the event rules below see it: every
// store updates and claims events through them, so that what an event's
// move does to its message is written once.
type EventTx interface {
	// Event reads an event; an error wrapping ErrNotFound when none has
	// that id.
	Event(id string) (*Event, error)
	// PutEvent stores after, the new state of the event read as before.
	PutEvent(before, after *Event) error
	// Status reads the status of a message.
	Status(messageID string) (Status, error)
	// Move applies t to a message that Status found in t.From.
	Move(t Transition) error
}

// UpdateEvent applies u in tx: ErrLockNotAcquired when the event is not in
// u.From, or not under the lease u.Held. When the event's outcome is a status, its message moves as
// EventMessageMove says, if it is where that move starts.
func UpdateEvent(tx EventTx, u EventUpdate) (*Event, error) {
	before, err := tx.Event(u.ID)
	if err != nil {
		return nil, err
	}
	if before.State != u.From || !u.Held.IsZero() && !SameLease(before.LeaseUntil, u.Held) {
		return nil, ErrLockNotAcquired
	}
	e := *before
	u.Apply(&e)
	if err := tx.PutEvent(before, &e); err != nil {
		return nil, err
	}
	from, dest, ok := EventMessageMove(e.Outcome, u.To)
	if !ok {
		return &e, nil
	}
	st, err := tx.Status(e.MessageID)
	if err != nil || st != from {
		return &e, err
	}
	return &e, tx.Move(Transition{ID: e.MessageID, From: from, To: dest, At: u.At, KeepReason: true, Reason: u.Reason})
}

// ClaimEvent moves e, pending and first in line for its message, to
// calling under c's lease, and its message along CallingPath to the
// outcome's calling status, in tx. It returns the claimed event.
func ClaimEvent(tx EventTx, e *Event, c EventClaim) (*Event, error) {
	after := *e
	after.State, after.LeaseUntil, after.UpdatedAt = EventCalling, c.LeaseUntil, c.Now
	if err := tx.PutEvent(e, &after); err != nil {
		return nil, err
	}
	st, err := tx.Status(e.MessageID)
	if err != nil {
		return nil, err
	}
	steps := CallingPath(st, e.Outcome)
	if len(steps) == 0 {
		return &after, nil
	}
	t := Path(e.MessageID, st, steps, c.Now, c.LeaseUntil, c.Reason)
	if steps[0] == Status(e.Outcome) && e.Reason != "" {
		// The message reaches the outcome (a bounce, a receipt) only
		// now: its row and the message's reason say why, not who calls
		// the plugins about it.
		t.Reason, t.KeepReason = e.Reason, false
	}
	if err := t.Check(); err != nil {
		return nil, err
	}
	return &after, tx.Move(t)
}
