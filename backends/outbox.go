// Package backends holds the outbox contract: the message rows, their
// statuses and transitions, the events told to plugins, and the rules every
// store (bbolt, MySQL, PostgreSQL, DynamoDB) keeps. A store implements Outbox; a part of
// the relay declares, where it uses a store, only the methods it calls. The
// conformance suite in backendtest checks a store against the contract.
package backends

import (
	"context"
	"errors"
	"time"
)

var (
	// ErrNotFound: no message (or event, or link, or document) has that id.
	ErrNotFound = errors.New("message not found")
	// ErrDuplicate: a message with that id exists already. Create returns it
	// only once the existing row is committed.
	ErrDuplicate = errors.New("a message with this id exists already")
	// ErrLockNotAcquired: the message was not in the expected status, so
	// another worker moved it first.
	ErrLockNotAcquired = errors.New("message is not in the expected status")
	// ErrInvalidTransition: the lifecycle does not allow that move.
	ErrInvalidTransition = errors.New("transition not allowed")
	// ErrOutcomeUnknown: the write's commit failed in a way that leaves it
	// unknown whether it landed (the connection was lost on the COMMIT's
	// reply). A caller keeps what the write may point to, such as a
	// message's spool file: the sweeps that find no row remove it.
	ErrOutcomeUnknown = errors.New("the commit failed and may have landed")
	// ErrBadCursor: a list cursor (ListQuery.After) this store did not
	// give; the caller's mistake, not the store's failure.
	ErrBadCursor = errors.New("start the listing again without it")
)

// Outbox is a whole store: every part of the contract, as the relay opens
// it. All methods are safe for concurrent use, and every change is durable
// when the method returns.
type Outbox interface {
	Messages
	Queue
	Leases
	Events
	Batches
	BatchTallies
	Cursors
	Links
	Alarms
	Throughput
	Suppressions
	Documents
	// Ping checks that the store answers.
	Ping(ctx context.Context) error
	Close() error
}

// Messages holds the message rows as intake creates them and operators
// read them.
type Messages interface {
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
}

// Queue moves messages through their lifecycle: the workers' claims and
// transitions, the restore of expired leases, retention.
type Queue interface {
	// Transition applies t; ErrLockNotAcquired when the message is not in
	// t.From, ErrInvalidTransition when the lifecycle forbids the move.
	// (It returns no message: reading the row back would cost a query that
	// the relay's hot paths do not need; Get does it.)
	Transition(ctx context.Context, t Transition) error
	// Claim moves up to c.Limit messages from c.From to c.To under a lease
	// and returns them, atomically: two claimers never get the same
	// message. See Claim for the order.
	Claim(ctx context.Context, c Claim) ([]*Message, error)
	// Restore returns messages whose lease ran out before expiredBefore to
	// the status before their working one (RestoreTransition), and calling
	// events whose lease ran out to pending.
	Restore(ctx context.Context, expiredBefore time.Time) (int, error)
	// Purge deletes up to limit messages in an acknowledged status whose
	// last change is before cutoff, with their history, events, links,
	// alarms, and the bytes and receipts the store keeps of them, and
	// returns them so that their spool files can be removed.
	Purge(ctx context.Context, cutoff time.Time, limit int) ([]*Message, error)
}

// Events holds the outcomes told to plugins: written with the change that
// makes them, claimed by the dispatcher in order per message.
type Events interface {
	// AddEvent records an event that comes after delivery (a bounce, a
	// delay, a complaint) on an existing message; ErrDuplicate when its id
	// is taken. An outcome that is a status moves the message when the
	// event is claimed, in order after the message's earlier events.
	AddEvent(ctx context.Context, e *Event) error
	// Events returns a message's events in order.
	Events(ctx context.Context, messageID string) ([]*Event, error)
	// EventsByState lists events in a state, oldest change first.
	EventsByState(ctx context.Context, state EventState, limit int) ([]*Event, error)
	// ClaimEvents takes pending events first in line for their message
	// (see EventClaim) and claims each as ClaimEvent does.
	ClaimEvents(ctx context.Context, c EventClaim) ([]*Event, error)
	// UpdateEvent applies u as the function UpdateEvent does.
	UpdateEvent(ctx context.Context, u EventUpdate) (*Event, error)
}

// Batches holds the batch codes an operator, or the brake
// (BatchTallies.TripBatch), suspended: the READY messages of a suspended
// batch are not claimed.
type Batches interface {
	SuspendBatch(ctx context.Context, code string) error
	// ActivateBatch lets the batch go on, and restarts its tally
	// (BatchTally.Restart).
	ActivateBatch(ctx context.Context, code string) error
	// SuspendedBatches lists the batch codes currently suspended.
	SuspendedBatches(ctx context.Context) ([]string, error)
}

// Cursors holds how far each mailbox poller has read, under a lease, so
// that relays sharing a store take turns on each mailbox. Delivery uses
// the same leases for what relays share of a site: its session slots and
// its suspension.
type Cursors interface {
	// ClaimCursor takes, for owner and until the given time, the lease on
	// the cursor of a mailbox poller, as Cursor.Claim rules, and returns
	// the cursor (zero when new). Owner renews by claiming again.
	ClaimCursor(ctx context.Context, name, owner string, until time.Time) (Cursor, error)
	// SaveCursor stores how far owner has read, as Cursor.Save rules.
	SaveCursor(ctx context.Context, name, owner string, c Cursor) error
	// ReadCursor returns a cursor as it is, without claiming it (zero
	// when it was never claimed): delivery reads through it the site
	// suspensions an operator made on any relay.
	ReadCursor(ctx context.Context, name string) (Cursor, error)
}

// Links holds other names of messages (a PEC provider's identificativo,
// say), by which later mail is tied to them.
type Links interface {
	// Link records key as another name of an existing message; the first
	// link of a key stays. Links go with the message when it is purged.
	Link(ctx context.Context, key, messageID string) error
	// Linked returns the id of the message linked under key; ErrNotFound
	// when none.
	Linked(ctx context.Context, key string) (string, error)
}

// Alarms holds the checks the relay owes messages at a time: a PEC
// message's receipts are late if they are not in by their deadline, say.
// A check reads only the alarms that are due, whatever the number of
// messages in the outbox.
type Alarms interface {
	// SetAlarm sets the message's alarm of a.Kind to ring at a.At, or
	// moves it; ErrNotFound when the message is not there.
	SetAlarm(ctx context.Context, a Alarm) error
	// ClearAlarm removes the message's alarm of kind; none is no error.
	ClearAlarm(ctx context.Context, kind, messageID string) error
	// DueAlarms lists up to limit alarms of kind that ring at or before
	// now, earliest first.
	DueAlarms(ctx context.Context, kind string, now time.Time, limit int) ([]Alarm, error)
}

// Throughput holds the counts per minute of what happens to messages
// (Activity), written in the transaction of each change, whichever relay
// makes it.
type Throughput interface {
	// Minutes returns the counts of the minutes from that of since on,
	// oldest first; a minute that counted nothing is left out.
	Minutes(ctx context.Context, since time.Time) ([]Minute, error)
	// PruneMinutes forgets the minutes before that of before.
	PruneMinutes(ctx context.Context, before time.Time) error
}
