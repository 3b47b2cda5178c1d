package sqlstore

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
)

// The steps below are those a SQL store takes inside a transaction once it
// holds the rows (Rows): every such store runs them, so that what a group
// of writes, a claim of events or a renewal does is written once. The
// store supplies its reads and locks (LockTx) and writes what changed at
// the end with its own statements.

// LockTx is a store's transaction as the shared steps drive it: it reads
// and locks rows by id, in id order (events before messages, as every
// transaction takes them), into the Rows it holds.
type LockTx interface {
	backends.EventTx
	Held() *Rows
	// LockEvents locks the events of ids that exist; skip passes over
	// those another transaction holds.
	LockEvents(ids []string, skip bool) error
	// LockMessages locks the messages of ids that exist.
	LockMessages(ids []string) error
}

// Write is one write of a store's group commit: a create, a transition,
// an event update or a claim, with what it gives back. A store's own
// write type embeds it beside what the store keeps of its own (a claim's
// first pick).
type Write struct {
	Create     *backends.Message
	Transition *backends.Transition
	Update     *backends.EventUpdate
	Event      *backends.Event // the event as Update left it
	Claim      *backends.Claim
	Claimed    []*backends.Message // what the claim took
	// Err is the write's own refusal, beside the group's outcome.
	Err error
}

// Base returns w: ApplyGroup reaches the Write a store's type embeds
// through it.
func (w *Write) Base() *Write { return w }

// Op is a store's write of a group commit.
type Op interface{ Base() *Write }

// refusal reports whether err is a write's own refusal (the message or
// event is not there, or not where the write starts) rather than a
// failure of the database.
func refusal(err error) bool {
	return errors.Is(err, backends.ErrNotFound) || errors.Is(err, backends.ErrLockNotAcquired)
}

// ApplyGroup sorts a group into creates, transitions, event updates and
// claims and applies them in tx, taking the locks in the one order: the
// updated events, the creates (insert), the messages moved, then the
// claims (claim, see claimAll), which skip the messages the other writes
// hold. insert creates the messages of creates in the store's tables,
// setting the Err of a create whose id is taken. Refusals are each write's
// own result (Write.Err) and do not fail the transaction. The store writes
// tx's rows after.
func ApplyGroup[O Op](tx LockTx, group []O, insert func(creates []O) error, claim ClaimFunc[O]) error {
	var creates, claims []O
	var msgIDs, evIDs []string
	for _, o := range group {
		w := o.Base()
		w.Err, w.Event, w.Claimed = nil, nil, nil
		switch {
		case w.Create != nil:
			creates = append(creates, o)
		case w.Transition != nil:
			msgIDs = append(msgIDs, w.Transition.ID)
		case w.Update != nil:
			evIDs = append(evIDs, w.Update.ID)
		case w.Claim != nil:
			claims = append(claims, o)
		}
	}
	if err := tx.LockEvents(evIDs, false); err != nil {
		return err
	}
	for _, e := range tx.Held().Events {
		msgIDs = append(msgIDs, e.MessageID)
	}
	if err := insert(creates); err != nil {
		return err
	}
	if err := tx.LockMessages(msgIDs); err != nil {
		return err
	}
	for _, o := range group {
		w := o.Base()
		var err error
		switch {
		case w.Transition != nil:
			err = tx.Move(*w.Transition)
		case w.Update != nil:
			w.Event, err = backends.UpdateEvent(tx, *w.Update)
		}
		if err != nil {
			if !refusal(err) {
				return err
			}
			w.Err = err
		}
	}
	return claimAll(tx, claims, claim)
}

// ClaimFunc locks the messages that the claims of same, which take from
// one status, may take together as all (their merged claim), and returns
// them in claim order.
type ClaimFunc[O Op] func(all backends.Claim, same []O) ([]*backends.Message, error)

// claimAll runs the claims of a group: those that take from one status
// together, as one claim of all their messages due by the earliest of
// their times, shared out in claim order; each message moves with its own
// claim's lease and reason.
func claimAll[O Op](tx backends.EventTx, claims []O, lock ClaimFunc[O]) error {
	var froms []backends.Status
	byFrom := map[backends.Status][]O{}
	for _, o := range claims {
		from := o.Base().Claim.From
		if _, ok := byFrom[from]; !ok {
			froms = append(froms, from)
		}
		byFrom[from] = append(byFrom[from], o)
	}
	for _, from := range froms {
		same := byFrom[from]
		all := *same[0].Base().Claim
		for _, o := range same[1:] {
			c := o.Base().Claim
			all.Limit += c.Limit
			if c.Now.Before(all.Now) {
				all.Now = c.Now
			}
		}
		msgs, err := lock(all, same)
		if err != nil {
			return err
		}
		for _, o := range same {
			w := o.Base()
			n := min(w.Claim.Limit, len(msgs))
			w.Claimed, msgs = msgs[:n:n], msgs[n:]
			for _, m := range w.Claimed {
				if err := tx.Move(w.Claim.Move(m.ID)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// CommitGroup runs a group in one transaction (run). When it fails, each
// write runs again alone, so that one bad write fails only itself; but
// when every statement ran and the COMMIT failed (ErrOutcomeUnknown), the
// group may have landed: run again, a create would count twice and a
// claim would take other messages, so each caller is told the commit's
// error instead.
func CommitGroup[O any](group []O, run func([]O) error) []error {
	err := run(group)
	if err == nil {
		return nil
	}
	errs := make([]error, len(group))
	if len(group) == 1 || errors.Is(err, backends.ErrOutcomeUnknown) {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i, o := range group {
		errs[i] = run([]O{o})
	}
	return errs
}

// ClaimHeldEvents claims, in tx, the events of ids that are still pending
// and that no other transaction holds: it locks them, then their
// messages, and claims the first of each message (ClaimEvent) in claim
// order (due time, number, id). It returns the claimed events.
func ClaimHeldEvents(tx LockTx, ids []string, c backends.EventClaim) ([]*backends.Event, error) {
	if err := tx.LockEvents(ids, true); err != nil {
		return nil, err
	}
	var events []*backends.Event
	var owners []string
	for _, e := range tx.Held().Events {
		if e.State == backends.EventPending {
			events = append(events, e)
			owners = append(owners, e.MessageID)
		}
	}
	slices.SortFunc(events, func(a, b *backends.Event) int {
		return cmp.Or(a.DueAt.Compare(b.DueAt), cmp.Compare(a.Seq, b.Seq), strings.Compare(a.ID, b.ID))
	})
	if err := tx.LockMessages(owners); err != nil {
		return nil, err
	}
	var out []*backends.Event
	taken := map[string]bool{}
	for _, e := range events {
		if taken[e.MessageID] {
			continue
		}
		taken[e.MessageID] = true
		claimed, err := backends.ClaimEvent(tx, e, c)
		if err != nil {
			return nil, err
		}
		out = append(out, claimed)
	}
	return out, nil
}

// AddHeldEvent adds e, prepared at now, to its message in tx, which it
// locks first: ErrNotFound when there is no such message.
func AddHeldEvent(tx LockTx, e *backends.Event, now time.Time) error {
	if err := tx.LockMessages([]string{e.MessageID}); err != nil {
		return err
	}
	held := tx.Held()
	if _, ok := held.Messages[e.MessageID]; !ok {
		return fmt.Errorf("message %s: %w", e.MessageID, backends.ErrNotFound)
	}
	if err := e.Prepare(e.MessageID, now); err != nil {
		return err
	}
	held.NewEvents = append(held.NewEvents, e)
	return nil
}

// HeldRenewals locks, in tx, the events of r, then their messages, and
// returns the events r renews and the messages whose lease goes with
// theirs (EventRenewal.Renews, RenewsMessage); the store sets both leases.
func HeldRenewals(tx LockTx, r backends.EventRenewal) (events, messages []string, err error) {
	if err := tx.LockEvents(r.IDs, false); err != nil {
		return nil, nil, err
	}
	held := tx.Held()
	var owners []string
	for _, id := range r.IDs {
		if e, ok := held.Events[id]; ok && r.Renews(e) {
			events = append(events, id)
			owners = append(owners, e.MessageID)
		}
	}
	if err := tx.LockMessages(owners); err != nil {
		return nil, nil, err
	}
	for _, id := range events {
		e := held.Events[id]
		if m, ok := held.Messages[e.MessageID]; ok && r.RenewsMessage(e, m) {
			messages = append(messages, m.ID)
		}
	}
	return events, messages, nil
}

// AdoptHeld takes over, in tx, the seed messages of ids (SeedAdoption)
// that are still the seed's, and returns what it did with each, to count
// once the store commits.
func AdoptHeld(tx LockTx, ids []string, now time.Time) ([]backends.Adopted, error) {
	if err := tx.LockMessages(ids); err != nil {
		return nil, err
	}
	var done []backends.Adopted
	for _, id := range ids {
		m, ok := tx.Held().Messages[id]
		if !ok || m.Envelope.Recipients != nil {
			continue // gone, or taken meanwhile
		}
		t, kind := backends.SeedAdoption(m, now)
		if t != nil {
			if err := tx.Move(*t); err != nil {
				return nil, fmt.Errorf("message %s: %w", id, err)
			}
		}
		done = append(done, kind)
	}
	return done, nil
}

// RestoreHeld takes msgs, working messages whose lease ran out that tx has
// locked, and moves each back where its work starts again
// (RestoreTransition).
func RestoreHeld(tx LockTx, msgs []*backends.Message, now time.Time) error {
	tx.Held().Adopt(msgs)
	for _, m := range msgs {
		if err := tx.Move(backends.RestoreTransition(m, now)); err != nil {
			return err
		}
	}
	return nil
}

// InChunks runs chunk, a transaction of a bounded number of rows, again
// until one finds none or fails, and returns the rows of all.
func InChunks(chunk func() (int, error)) (int, error) {
	total := 0
	for {
		n, err := chunk()
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}
