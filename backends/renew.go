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
	if !r.Status.Working() {
		return fmt.Errorf("renew leases in %s: not a working status", r.Status)
	}
	if r.Held.IsZero() || r.Until.IsZero() {
		return fmt.Errorf("renew leases in %s: the lease held and the new one are both needed", r.Status)
	}
	if len(r.IDs) > MaxRenewal {
		return fmt.Errorf("renew leases in %s: %d messages at once, more than %d", r.Status, len(r.IDs), MaxRenewal)
	}
	for _, id := range r.IDs {
		if err := CheckID(id); err != nil {
			return err
		}
	}
	return nil
}

// Renews reports whether r renews m's lease: m is in r.Status under the
// lease r.Held.
func (r *Renewal) Renews(m *Message) bool {
	return m.Status == r.Status && SameLease(m.LeaseUntil, r.Held)
}
