package backends

import (
	"context"
	"fmt"
	"time"
)

// LeasePrecision is the precision every store keeps a lease at (MySQL's
// DATETIME(6)): leases that name a claim compare at it.
const LeasePrecision = time.Microsecond

// SameLease reports whether two leases are the same at LeasePrecision.
func SameLease(a, b time.Time) bool {
	return a.Truncate(LeasePrecision).Equal(b.Truncate(LeasePrecision))
}

// Holds reports whether t may move m: m is in t.From and, when t names the
// lease it was claimed under (Held), still under that lease. A lease is a
// fencing token: once it ran out and another worker claimed the message
// again, the message carries the newer claim's lease, and an outcome of
// the older claim written late (retried, replayed after a restart) cannot
// overwrite the newer claim's work.
func (t *Transition) Holds(m *Message) bool {
	return m.Status == t.From && (t.Held.IsZero() || SameLease(m.LeaseUntil, t.Held))
}

// Leases lets a worker keep the messages it holds while it works on them,
// so that leases can be short: a relay that dies leaves its messages to
// another within a lease, and a slow but live worker keeps its own.
type Leases interface {
	// Renew extends to r.Until the lease of every message of r.IDs that is
	// still in r.Status under the lease r.Held, in one statement or
	// transaction (or one request per few dozen messages where the store
	// bounds them), and returns their ids. A message not returned is lost
	// to its holder: it moved on, or its lease ran out and another worker
	// claimed it. After an error, any of them may have been renewed or
	// not: the holder then knows only that each is under r.Held or r.Until.
	Renew(ctx context.Context, r Renewal) ([]string, error)
	// RenewEvents extends to r.Until the lease of every event of r.IDs
	// still calling under the lease r.Held and, in the same transaction,
	// the lease of its message when r.RenewsMessage says so: a claim gives
	// an event and its message one lease, and a renewal keeps it one, so
	// that a restore returns both or neither. It returns the ids of the
	// events renewed; an event not returned is lost to its holder, and
	// after an error the holder knows as much as after Renew's.
	RenewEvents(ctx context.Context, r EventRenewal) ([]string, error)
}

// Renewal extends the leases of messages held under the same lease.
type Renewal struct {
	IDs    []string
	Status Status
	Held   time.Time
	Until  time.Time
}

// MaxRenewal bounds the ids of one Renewal, so that one renewal stays one
// short write.
const MaxRenewal = 100

// Check validates a renewal before the store looks at anything.
func (r *Renewal) Check() error {
	what := fmt.Sprintf("leases in %s", r.Status)
	if !r.Status.Working() {
		return fmt.Errorf("renew %s: not a working status", what)
	}
	if err := checkRenewal(what, r.IDs, r.Held, r.Until); err != nil {
		return err
	}
	for _, id := range r.IDs {
		if err := CheckID(id); err != nil {
			return err
		}
	}
	return nil
}

// checkRenewal checks what every renewal needs: both leases, and a bound
// on the leases renewed at once.
func checkRenewal(what string, ids []string, held, until time.Time) error {
	if held.IsZero() || until.IsZero() {
		return fmt.Errorf("renew %s: the lease held and the new one are both needed", what)
	}
	if len(ids) > MaxRenewal {
		return fmt.Errorf("renew %s: %d at once, more than %d", what, len(ids), MaxRenewal)
	}
	// A store may write every id in one transaction, which may name an
	// item once.
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			return fmt.Errorf("renew %s: %s named twice; name each once", what, id)
		}
		seen[id] = true
	}
	return nil
}

// Renews reports whether r renews m's lease: m is in r.Status under the
// lease r.Held.
func (r *Renewal) Renews(m *Message) bool {
	return m.Status == r.Status && SameLease(m.LeaseUntil, r.Held)
}

// EventRenewal extends the leases of calling events held under the same
// lease, and of their messages (see Leases.RenewEvents).
type EventRenewal struct {
	IDs   []string
	Held  time.Time
	Until time.Time
}

// Check validates a renewal of events before the store looks at anything.
func (r *EventRenewal) Check() error {
	return checkRenewal("the leases of calling events", r.IDs, r.Held, r.Until)
}

// Renews reports whether r renews e's lease: e is calling under the lease
// r.Held.
func (r *EventRenewal) Renews(e *Event) bool {
	return e.State == EventCalling && SameLease(e.LeaseUntil, r.Held)
}

// RenewsMessage reports whether r renews, with the event e it renews, the
// lease of e's message m: m is in the calling status of e's outcome under
// the lease r.Held. A notice moves no status, and leaves its message alone.
func (r *EventRenewal) RenewsMessage(e *Event, m *Message) bool {
	calling, _, ok := CallbackStatuses(e.Outcome)
	return ok && (&Renewal{Status: calling, Held: r.Held}).Renews(m)
}
