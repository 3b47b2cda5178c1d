// Package lease keeps the claims a worker holds while it works on them: a
// Renewer renews their leases in batches, a third of a lease apart, so that
// leases can be short. A relay that dies leaves its messages and events to
// another within a lease, and a slow but live delivery or plugin call is
// never claimed twice.
package lease

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/genropy/postino/backends"
)

// Store is what a renewer of messages needs of the outbox.
type Store interface {
	Renew(ctx context.Context, r backends.Renewal) ([]string, error)
}

// EventStore is what a renewer of calling events needs of the outbox.
type EventStore interface {
	RenewEvents(ctx context.Context, r backends.EventRenewal) ([]string, error)
}

// renewFunc renews, in one call to the outbox, the leases of ids held
// under held to until, and returns the ids renewed.
type renewFunc func(ctx context.Context, ids []string, held, until time.Time) ([]string, error)

// maxCandidates bounds the leases a hold may be under while renewals fail
// in ways that leave their outcome unknown.
const maxCandidates = 4

// Hold is one message, or event, the renewer keeps.
type Hold struct {
	id string
	// leases are those the message may be under, guarded by the renewer's
	// mu: the last one known first, then those of renewals whose outcome
	// is unknown (the store failed, perhaps after writing).
	leases []time.Time
	// renewing is the lease a renewal under way asks for, zero when none
	// is: until it answers, the message may be under it too.
	renewing time.Time
	lost     bool
}

// Renewer renews the leases of the messages a worker holds in one working
// status, or of the events a dispatcher holds calling. Its methods are safe
// for concurrent use.
type Renewer struct {
	store renewFunc
	// what says, in its logs, what it renews.
	what  slog.Attr
	lease time.Duration
	log   *slog.Logger

	// round keeps rounds of renewals one at a time.
	round sync.Mutex
	mu    sync.Mutex
	holds map[*Hold]struct{}
}

// New makes a renewer of the messages held in status for lease at a time;
// Run renews them.
func New(store Store, status backends.Status, lease time.Duration, log *slog.Logger) *Renewer {
	renew := func(ctx context.Context, ids []string, held, until time.Time) ([]string, error) {
		return store.Renew(ctx, backends.Renewal{IDs: ids, Status: status, Held: held, Until: until})
	}
	return newRenewer(renew, slog.Any("status", status), lease, log)
}

// ForEvents makes a renewer of the events held calling, and with each its
// message (Leases.RenewEvents), for lease at a time; Run renews them.
func ForEvents(store EventStore, lease time.Duration, log *slog.Logger) *Renewer {
	renew := func(ctx context.Context, ids []string, held, until time.Time) ([]string, error) {
		return store.RenewEvents(ctx, backends.EventRenewal{IDs: ids, Held: held, Until: until})
	}
	return newRenewer(renew, slog.String("holds", "calling events"), lease, log)
}

func newRenewer(renew renewFunc, what slog.Attr, lease time.Duration, log *slog.Logger) *Renewer {
	return &Renewer{store: renew, what: what, lease: lease, log: log, holds: map[*Hold]struct{}{}}
}

// Hold starts keeping the message, or event, id, claimed under the lease
// until.
func (r *Renewer) Hold(id string, until time.Time) *Hold {
	h := &Hold{id: id, leases: []time.Time{until}}
	r.mu.Lock()
	r.holds[h] = struct{}{}
	r.mu.Unlock()
	return h
}

// Until returns the lease h is known to be under, and whether it is lost:
// a renewal found the message moved on, or under another worker's lease.
func (r *Renewer) Until(h *Hold) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return h.leases[0], h.lost
}

// Release stops keeping h and returns the leases the message may be under,
// the one known first, and last the one a renewal under way asks for: a
// transition that names the lease it holds tries them in turn. It does not
// wait for the renewal, which the store orders against the transition
// either way: a worker finishing a message is not held up by a slow store.
func (r *Renewer) Release(h *Hold) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.holds, h)
	leases := slices.Clone(h.leases)
	if !h.renewing.IsZero() {
		leases = append(leases, h.renewing)
	}
	return leases
}

// Run renews the leases held, a third of a lease apart, until ctx ends.
func (r *Renewer) Run(ctx context.Context) {
	tick := time.NewTicker(r.every())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			r.Renew(ctx)
		}
	}
}

// every is the time between two rounds of renewals.
func (r *Renewer) every() time.Duration { return max(r.lease/3, time.Millisecond) }

// Renew renews every lease held once, in batches of the holds under the
// same lease. A hold whose every candidate lease is refused is lost.
func (r *Renewer) Renew(ctx context.Context) {
	r.round.Lock()
	defer r.round.Unlock()
	// A store that hangs must not hold up the next round: what is not
	// renewed by its time is tried again then.
	ctx, cancel := context.WithTimeout(ctx, r.every())
	defer cancel()
	until := time.Now().UTC().Add(r.lease)
	// Each hold is tried under its first candidate lease, then, when
	// refused, under the next.
	r.mu.Lock()
	pending := make(map[*Hold]int, len(r.holds))
	for h := range r.holds {
		pending[h] = 0
	}
	r.mu.Unlock()
	for len(pending) > 0 {
		groups := map[time.Time][]*Hold{}
		r.mu.Lock()
		for h, k := range pending {
			held := h.leases[k]
			groups[held] = append(groups[held], h)
		}
		r.mu.Unlock()
		next := map[*Hold]int{}
		for held, hs := range groups {
			for chunk := range slices.Chunk(hs, backends.MaxRenewal) {
				r.renew(ctx, held, until, chunk, pending, next)
			}
		}
		pending = next
	}
}

// renew renews the holds of chunk, under held, to until; those refused
// that have another candidate lease go into next, with its index.
func (r *Renewer) renew(ctx context.Context, held, until time.Time, chunk []*Hold, tried, next map[*Hold]int) {
	// A hold released since the round began is left alone: Release gave
	// its worker the leases it knew of, and a renewal now would put the
	// message under another. Those still held are renewing from here on,
	// which a Release under way reports.
	var ids []string
	r.mu.Lock()
	chunk = slices.DeleteFunc(chunk, func(h *Hold) bool { _, kept := r.holds[h]; return !kept })
	for _, h := range chunk {
		ids = append(ids, h.id)
		h.renewing = until
	}
	r.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	got, err := r.store(ctx, ids, held, until)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range chunk {
		h.renewing = time.Time{}
	}
	if err != nil {
		// The store may have written before it failed: until becomes a
		// candidate, and the next round tries both.
		r.log.Warn("cannot renew leases; retrying at the next round", r.what, "count", len(ids), "error", err)
		for _, h := range chunk {
			if len(h.leases) < maxCandidates {
				h.leases = append(h.leases, until)
			}
		}
		return
	}
	renewed := make(map[string]bool, len(got))
	for _, id := range got {
		renewed[id] = true
	}
	for _, h := range chunk {
		if _, kept := r.holds[h]; !kept {
			continue // released while the renewal was under way
		}
		switch k := tried[h]; {
		case renewed[h.id]:
			h.leases = []time.Time{until}
		case k+1 < len(h.leases):
			next[h] = k + 1
		default:
			h.lost = true
			delete(r.holds, h)
			r.log.Warn("lease lost: it moved on or another worker holds it", "id", h.id, r.what, "lease_until", held)
		}
	}
}

// Write writes t with write, holding the first of leases (from Release),
// and the next while the outbox refuses t for its lease.
func Write(t backends.Transition, leases []time.Time, write func(backends.Transition) error) error {
	return Try(leases, func(held time.Time) error {
		t.Held = held
		return write(t)
	})
}

// Try calls write holding the first of leases (from Release), and the
// next while the outbox refuses the write for its lease: write names held
// as the lease it holds, as EventUpdate.Held does.
func Try(leases []time.Time, write func(held time.Time) error) error {
	if len(leases) == 0 {
		return errors.New("no lease to write under: the worker must name the lease it holds")
	}
	var err error
	for _, held := range leases {
		if err = write(held); !errors.Is(err, backends.ErrLockNotAcquired) {
			return err
		}
	}
	return err
}
