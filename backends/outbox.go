// Package backends holds the outbox contract: the message rows, their
// statuses and transitions, and the rules every store (bbolt, MySQL,
// DynamoDB) keeps. The conformance suite in backendtest checks a store
// against it.
package backends

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

var (
	// ErrNotFound: no message has that id.
	ErrNotFound = errors.New("message not found")
	// ErrDuplicate: a message with that id exists already. Create returns it
	// only once the existing row is committed.
	ErrDuplicate = errors.New("a message with this id exists already")
	// ErrLockNotAcquired: the message was not in the expected status, so
	// another worker moved it first.
	ErrLockNotAcquired = errors.New("message is not in the expected status")
	// ErrInvalidTransition: the lifecycle does not allow that move.
	ErrInvalidTransition = errors.New("transition not allowed")
)

// Priorities of X-Postino-Priority, as in the seed: lower is sooner.
const (
	PriorityImmediate = 0
	PriorityHigh      = 1
	PriorityNormal    = 2
	PriorityLow       = 3
)

// Message is one outbox row.
type Message struct {
	// ID is the X-Genro-Mail-ID: set by the app or generated at intake.
	ID string `json:"id"`
	// MessageID is the Message-ID header, without angle brackets.
	MessageID string `json:"message_id,omitempty"`
	Status    Status `json:"status"`
	// Reason explains the latest status.
	Reason string `json:"reason,omitempty"`
	// Version counts the row's updates where the store keeps it (MySQL).
	Version int `json:"version"`

	Priority int    `json:"priority"`
	Batch    string `json:"batch,omitempty"`
	// DueAt is the earliest time the message may be claimed from READY.
	DueAt    time.Time `json:"due_at"`
	Attempts int       `json:"attempts"`
	// LeaseUntil is when a working status (INTAKING, PROCESSING,
	// CALLING-*) expires and the message returns one step back.
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// Route names the delivery route chosen at intake.
	Route string `json:"route,omitempty"`

	// EmlPath is the spool file, relative to the spool directory.
	EmlPath string `json:"eml_path"`
	// PayloadPath is kept for rows migrated from the seed layout, whose
	// envelope lived in a JSON file; Postino keeps the envelope in the row.
	PayloadPath string `json:"payload_path,omitempty"`

	Envelope Envelope `json:"envelope"`
	// Results holds the latest result of each recipient, in envelope order,
	// once a delivery has been attempted.
	Results []RecipientResult `json:"results,omitempty"`

	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// TTL is when a store that expires items (DynamoDB) may drop the
	// message, in Unix seconds; nil where the store keeps no TTL.
	TTL *int64 `json:"ttl,omitempty"`
}

// Envelope is what the SMTP transaction told the relay about the message.
type Envelope struct {
	// Sender is the MAIL FROM address; empty for the null sender <>.
	Sender     string    `json:"sender"`
	Recipients []string  `json:"recipients"`
	ClientAddr string    `json:"client_addr,omitempty"`
	Helo       string    `json:"helo,omitempty"`
	AuthUser   string    `json:"auth_user,omitempty"`
	TLS        bool      `json:"tls,omitempty"`
	ReceivedAt time.Time `json:"received_at"`
	// SMTPUTF8 is set when the client asked for it: the addresses or
	// headers may hold UTF-8 and the upstream must offer SMTPUTF8.
	SMTPUTF8 bool `json:"smtputf8,omitempty"`
	// EightBit is set when the content holds octets above 127.
	EightBit bool  `json:"eight_bit,omitempty"`
	Size     int64 `json:"size"`
	// Control holds the X-Postino-* header values as the app wrote them.
	Control map[string]string `json:"control,omitempty"`
}

// Recipient states.
const (
	RecipientPending = "pending" // not tried yet, or deferred
	RecipientSent    = "sent"    // accepted upstream
	RecipientFailed  = "failed"  // refused for good, or expired
)

// RecipientResult is what became of one recipient.
type RecipientResult struct {
	Address string `json:"address"`
	Status  string `json:"status"`
	// Code and Enhanced are the upstream's reply ("550", "5.1.1"), Text its
	// words or the relay's own explanation; Host is the upstream host.
	Code     int       `json:"code,omitempty"`
	Enhanced string    `json:"enhanced_code,omitempty"`
	Text     string    `json:"text,omitempty"`
	Host     string    `json:"host,omitempty"`
	At       time.Time `json:"at,omitzero"`
}

// RecipientResults returns the message's results, with every envelope
// recipient that has none yet pending.
func (m *Message) RecipientResults() []RecipientResult {
	out := make([]RecipientResult, len(m.Envelope.Recipients))
	for i, a := range m.Envelope.Recipients {
		out[i] = RecipientResult{Address: a, Status: RecipientPending}
		if i < len(m.Results) && m.Results[i].Address == a {
			out[i] = m.Results[i]
		}
	}
	return out
}

// HistoryEntry is one status change of a message.
type HistoryEntry struct {
	Status Status    `json:"status"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
	// Details holds structured data about the change (per-recipient SMTP
	// results, for instance) as a JSON object.
	Details json.RawMessage `json:"details,omitempty"`
}

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
	// DueAt, when not zero, sets the message's due time.
	DueAt time.Time
	// AddAttempt counts one more delivery attempt.
	AddAttempt bool
	// Route, when not empty, records the route chosen at intake.
	Route string
	// Results, when not nil, replaces the recipients' results.
	Results []RecipientResult
	// Event, when set, is recorded in the same transaction (see Event for
	// the fields the store fills in).
	Event *Event
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
	return nil
}

// Claim takes up to Limit messages in From and moves them to To (a working
// status) under a lease, atomically: two claimers never get the same message.
// Messages come in order of priority, then due time, then age; a message whose
// DueAt is after Now is not taken, and neither, when From is READY, is a
// message of a suspended batch.
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

// ListQuery selects messages for operators.
type ListQuery struct {
	// Status, when set, lists messages in that status in claim order;
	// otherwise the newest messages come first.
	Status Status
	// After continues a listing where the previous page ended: the cursor
	// that List returned with it.
	After string
	Limit int
}

// Outbox is the contract every store implements. All methods are safe for
// concurrent use, and every change is durable when the method returns.
type Outbox interface {
	// Create stores a new message in ACCEPTED with its first history row.
	// It returns ErrDuplicate when the id exists.
	Create(ctx context.Context, m *Message) error
	Get(ctx context.Context, id string) (*Message, error)
	History(ctx context.Context, id string) ([]HistoryEntry, error)
	// ByMessageID returns the messages carrying that Message-ID, oldest first.
	ByMessageID(ctx context.Context, messageID string) ([]*Message, error)
	// List returns a page of messages and the cursor of the next page,
	// empty when there is none.
	List(ctx context.Context, q ListQuery) ([]*Message, string, error)
	// Counts returns how many messages each status holds.
	Counts(ctx context.Context) (map[Status]int, error)

	// Transition applies t; ErrLockNotAcquired when the message is not in
	// t.From, ErrInvalidTransition when the lifecycle forbids the move.
	// (It returns no message: reading the row back would cost a query that
	// the relay's hot paths do not need; Get does it.)
	Transition(ctx context.Context, t Transition) error
	Claim(ctx context.Context, c Claim) ([]*Message, error)
	// Restore returns messages whose lease ran out before expiredBefore to
	// the status before their working one, keeping reason and attempts, and
	// calling events whose lease ran out to pending.
	Restore(ctx context.Context, expiredBefore time.Time) (int, error)

	// AddEvent records an event that comes after delivery (a bounce, a
	// delay, a complaint) on an existing message; ErrDuplicate when its id
	// is taken. An outcome that is a status moves the message when the
	// event is claimed, in order after the message's earlier events.
	AddEvent(ctx context.Context, e *Event) error
	// Events returns a message's events in order.
	Events(ctx context.Context, messageID string) ([]*Event, error)
	// EventsByState lists events in a state, oldest change first.
	EventsByState(ctx context.Context, state EventState, limit int) ([]*Event, error)
	ClaimEvents(ctx context.Context, c EventClaim) ([]*Event, error)
	// UpdateEvent applies u; ErrLockNotAcquired when the event is not in
	// u.From. It moves the event's message as EventMessageMove says, when
	// the message is where the move starts.
	UpdateEvent(ctx context.Context, u EventUpdate) (*Event, error)

	SuspendBatch(ctx context.Context, code string) error
	ActivateBatch(ctx context.Context, code string) error
	// SuspendedBatches lists the batch codes currently suspended.
	SuspendedBatches(ctx context.Context) ([]string, error)

	// Purge deletes up to limit messages in an acknowledged status whose
	// last change is before cutoff, with their history and events, and
	// returns them so that their spool files can be removed.
	Purge(ctx context.Context, cutoff time.Time, limit int) ([]*Message, error)

	// Link records key as another name of an existing message (a PEC
	// provider's identificativo, say); the first link of a key stays.
	// Links go with the message when it is purged.
	Link(ctx context.Context, key, messageID string) error
	// Linked returns the id of the message linked under key; ErrNotFound
	// when none.
	Linked(ctx context.Context, key string) (string, error)

	// ClaimCursor takes, for owner and until the given time, the lease on
	// the cursor of a mailbox poller, when nobody else holds it or their
	// lease ran out, and returns the cursor (zero when new). It returns
	// ErrLockNotAcquired while another owner holds it. Owner renews by
	// claiming again.
	ClaimCursor(ctx context.Context, name, owner string, until time.Time) (Cursor, error)
	// SaveCursor stores how far owner has read; ErrLockNotAcquired when
	// owner no longer holds the lease.
	SaveCursor(ctx context.Context, name, owner string, c Cursor) error

	// Ping checks that the store answers.
	Ping(ctx context.Context) error
	Close() error
}

// Cursor is how far a mailbox poller has read a folder: the UIDs up to
// LastUID of the folder's UIDVALIDITY are handled. Relays sharing a store
// share their mailboxes through it: one at a time polls each.
type Cursor struct {
	UIDValidity uint32    `json:"uid_validity"`
	LastUID     uint32    `json:"last_uid"`
	Owner       string    `json:"owner"`
	LeaseUntil  time.Time `json:"lease_until"`
}

// CheckLinkKey accepts a link key.
func CheckLinkKey(key string) error {
	if key == "" || len(key) > 255 {
		return fmt.Errorf("link key %q: give 1 to 255 characters", key)
	}
	return nil
}

// CheckCursorName accepts the name of a mailbox cursor.
func CheckCursorName(name string) error {
	if name == "" || len(name) > 255 {
		return fmt.Errorf("cursor name %q: give 1 to 255 characters", name)
	}
	return nil
}

// MaxIDLength is the longest X-Genro-Mail-ID: a UUID's 36 characters.
const MaxIDLength = 36

// PrepareCreate checks a message given to Create and fills in what the
// caller may leave out: it is ACCEPTED, created now unless the caller says
// when, and due when created unless held for later. The store sets Version.
func (m *Message) PrepareCreate(now time.Time) error {
	if err := CheckID(m.ID); err != nil {
		return err
	}
	if m.Priority < PriorityImmediate || m.Priority > PriorityLow {
		return fmt.Errorf("priority %d is out of range 0..3", m.Priority)
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = now
	}
	if m.DueAt.IsZero() {
		m.DueAt = m.CreatedAt
	}
	m.Status, m.UpdatedAt, m.LeaseUntil = StatusAccepted, m.CreatedAt, time.Time{}
	return nil
}

// CheckID reports whether id is a valid message id: 1 to 36 letters, digits,
// '-', '_' or '.'. Stores and file names rely on that alphabet.
func CheckID(id string) error {
	return checkToken("message id", id, MaxIDLength, "-_.")
}

// MaxBatchLength bounds X-Postino-Batch codes.
const MaxBatchLength = 64

// CheckBatch reports whether code is a valid batch code: 1 to 64 letters,
// digits, '-', '_', '.' or ':'.
func CheckBatch(code string) error {
	return checkToken("batch code", code, MaxBatchLength, "-_.:")
}

func checkToken(what, s string, max int, punct string) error {
	if s == "" || len(s) > max {
		return fmt.Errorf("%s %q must be 1 to %d characters long", what, s, max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(punct, c) >= 0
		if !ok {
			return fmt.Errorf("%s %q holds %q: only letters, digits and %q are allowed", what, s, c, punct)
		}
	}
	return nil
}
