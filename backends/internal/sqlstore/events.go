package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
)

// AddEvent is Events.AddEvent: e goes to its message, locked, in a
// transaction of its own. A key taken is the event's id
// (backends.ErrDuplicate): it was added before (a receipt read again).
func (s Store) AddEvent(ctx context.Context, e *backends.Event) error {
	now := time.Now().UTC()
	err := s.InTx(ctx, func(tx Tx) error {
		if err := AddHeldEvent(tx, e, now); err != nil {
			return err
		}
		return tx.Write()
	})
	if s.Fault(err) == KeyTaken {
		err = backends.ErrDuplicate
	}
	if err != nil {
		return fmt.Errorf("add event to %s: %w", e.MessageID, err)
	}
	return nil
}

// Events is Events.Events: the events of message id that st selects.
func (s Store) Events(ctx context.Context, id string, st Stmt) ([]*backends.Event, error) {
	return ofMessage(ctx, s, id, s.ScanEvent, st)
}

// EventsByState is Events.EventsByState: the events st selects.
func (s Store) EventsByState(ctx context.Context, st Stmt) ([]*backends.Event, error) {
	return QueryAll(ctx, s.DB, s.ScanEvent, st)
}

// ClaimEvents is Events.ClaimEvents. First the candidates pick selects,
// the ids of the due pending events first in line, without locks and
// outside the transaction, so that finding none costs one read: an event
// first in line stays so, since an acknowledged event never goes back.
// Then, in a transaction, it claims those still pending
// (ClaimHeldEvents): another relay may have taken some.
func (s Store) ClaimEvents(ctx context.Context, c backends.EventClaim, pick Stmt) ([]*backends.Event, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	ids, err := QueryAll(ctx, s.DB, s.ScanID, pick)
	if err != nil {
		return nil, fmt.Errorf("claim events: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var out []*backends.Event
	err = s.InTx(ctx, func(tx Tx) error {
		var err error
		if out, err = ClaimHeldEvents(tx, ids, c); err != nil {
			return err
		}
		return tx.Write()
	})
	if err != nil {
		return nil, fmt.Errorf("claim events: %w", err)
	}
	return out, nil
}

// Renew is Leases.Renew: renew moves the leases of r held at held to
// until, in one statement or transaction, and returns the ids it renewed.
func (s Store) Renew(ctx context.Context, r backends.Renewal, renew func(held, until time.Time) ([]string, error)) ([]string, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	if len(r.IDs) == 0 {
		return nil, nil
	}
	renewed, err := renew(s.lease(r.Held), s.lease(r.Until))
	if err != nil {
		return nil, fmt.Errorf("renew %d leases in %s: %w", len(r.IDs), r.Status, err)
	}
	return renewed, nil
}

// lease is t as the store keeps a lease (backends.LeasePrecision).
func (s Store) lease(t time.Time) time.Time { return s.Time(t).Truncate(backends.LeasePrecision) }

// RenewEvents is Leases.RenewEvents: it locks the events, then their
// messages, as every transaction does, and renews those r renews with
// setLease, a statement for each table (events, then messages) given the
// ids of its key column.
func (s Store) RenewEvents(ctx context.Context, r backends.EventRenewal, setLease func(table, key string, ids []string, until time.Time) Stmt) ([]string, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	until := s.lease(r.Until)
	var renewed []string
	err := s.InTx(ctx, func(tx Tx) error {
		var msgs []string
		var err error
		if renewed, msgs, err = HeldRenewals(tx, r); err != nil {
			return err
		}
		for _, set := range []struct {
			table, key string
			ids        []string
		}{{"email_events", "event_id", renewed}, {"emails", "id", msgs}} {
			if len(set.ids) == 0 {
				continue
			}
			st := setLease(set.table, set.key, set.ids, until)
			if _, err := tx.Exec(ctx, st.Query, st.Args...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("renew the leases of %d calling events: %w", len(r.IDs), err)
	}
	return renewed, nil
}

// Restore is Queue.Restore: chunk by chunk, a transaction each, it returns
// to pending the calling events whose lease ran out, with events (a
// statement of the time now and expiredBefore), then locks the working
// messages whose lease ran out, with messages, and moves them back
// (RestoreHeld). Events first: every transaction locks events before
// messages.
func (s Store) Restore(ctx context.Context, expiredBefore time.Time, events func(now, expiredBefore time.Time) Stmt, messages Stmt) (int, error) {
	total, err := InChunks(func() (int, error) {
		n := 0
		now := time.Now().UTC()
		err := s.InTx(ctx, func(tx Tx) error {
			n = 0
			upd := events(now, expiredBefore)
			ne, err := tx.Exec(ctx, upd.Query, upd.Args...)
			if err != nil {
				return err
			}
			if ne > 0 {
				tx.EventsDue()
			}
			msgs, err := s.messages(ctx, tx, messages)
			if err != nil {
				return err
			}
			if err := RestoreHeld(tx, msgs, now); err != nil {
				return err
			}
			n = len(msgs) + int(ne)
			return tx.Write()
		})
		return n, err
	})
	if err != nil {
		return total, fmt.Errorf("restore: %w", err)
	}
	return total, nil
}
