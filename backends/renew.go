package backends

import "time"

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
