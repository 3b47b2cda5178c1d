package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// Renew moves the leases r renews with one statement, which returns the
// rows it changed.
func (s *Store) Renew(ctx context.Context, r backends.Renewal) ([]string, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	if len(r.IDs) == 0 {
		return nil, nil
	}
	rows, err := s.pool.Query(ctx, "UPDATE emails SET lease_until = $1 WHERE status = $2 AND lease_until = $3 AND id = ANY($4) RETURNING id",
		ts(r.Until), r.Status, ts(r.Held), r.IDs)
	var renewed []string
	if err == nil {
		renewed, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
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
	until := ts(r.Until)
	var renewed []string
	err := s.tx(ctx, func(tx pgx.Tx) error {
		w := newTxRows(ctx, tx, s.sender)
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
func setLease(ctx context.Context, tx pgx.Tx, table, key string, ids []string, until time.Time) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, "UPDATE "+table+" SET lease_until = $1 WHERE "+key+" = ANY($2)", until, ids)
	return err
}
