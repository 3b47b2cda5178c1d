package mysql

import (
	"context"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

func (s *Store) Renew(ctx context.Context, r backends.Renewal) ([]string, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	if len(r.IDs) == 0 {
		return nil, nil
	}
	held, until := r.Held.UTC().Truncate(backends.LeasePrecision), r.Until.UTC().Truncate(backends.LeasePrecision)
	ids := make([]any, len(r.IDs))
	for i, id := range r.IDs {
		ids[i] = id
	}
	var renewed []string
	err := s.tx(ctx, func(tx *txn) error {
		_, err := tx.ExecContext(ctx, "UPDATE emails SET lease_until = ? WHERE status = ? AND lease_until = ? AND id IN ("+inList(len(ids))+")",
			append([]any{until, r.Status, held}, ids...)...)
		if err != nil {
			return err
		}
		// The rows the update changed are locked by it: reading them back in
		// the same transaction tells which they are.
		rows, err := tx.QueryContext(ctx, "SELECT id FROM emails WHERE status = ? AND lease_until = ? AND id IN ("+inList(len(ids))+")",
			append([]any{r.Status, until}, ids...)...)
		if err != nil {
			return err
		}
		renewed, err = scanIDs(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("renew %d leases in %s: %w", len(r.IDs), r.Status, err)
	}
	return renewed, nil
}

// RenewEvents locks the events, then their messages, as every transaction
// does, and renews those r renews with one statement for each table.
func (s *Store) RenewEvents(ctx context.Context, r backends.EventRenewal) ([]string, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	until := r.Until.UTC().Truncate(backends.LeasePrecision)
	var renewed []string
	err := s.tx(ctx, func(tx *txn) error {
		w := newTxRows(ctx, tx)
		var msgs []string
		var err error
		if renewed, msgs, err = sqlstore.HeldRenewals(w, r); err != nil {
			return err
		}
		if err := setLease(ctx, tx, "email_events", "event_id", renewed, until); err != nil {
			return err
		}
		return setLease(ctx, tx, "emails", "id", msgs, until)
	})
	if err != nil {
		return nil, fmt.Errorf("renew the leases of %d calling events: %w", len(r.IDs), err)
	}
	return renewed, nil
}

// setLease sets the lease of the rows of table whose key column holds one
// of ids, which the transaction has locked.
func setLease(ctx context.Context, tx *txn, table, key string, ids []string, until time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	args := sortedIDs(ids) // once each: an id may come twice
	_, err := tx.ExecContext(ctx, "UPDATE "+table+" SET lease_until = ? WHERE "+key+" IN ("+inList(len(args))+")",
		append([]any{until}, args...)...)
	return err
}
