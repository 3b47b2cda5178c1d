package mysql

import (
	"context"
	"time"

	"github.com/genropy/postino/backends"
)

// Renew moves the leases r renews, then reads back which: the rows the
// update changed are locked by it, and reading them back in the same
// transaction tells which they are (MySQL's UPDATE returns no rows).
func (s *Store) Renew(ctx context.Context, r backends.Renewal) ([]string, error) {
	return s.sql.Renew(ctx, r, func(held, until time.Time) ([]string, error) {
		ids := anyOf(r.IDs)
		var renewed []string
		err := s.tx(ctx, func(tx *txn) error {
			_, err := tx.ExecContext(ctx, "UPDATE emails SET lease_until = ? WHERE status = ? AND lease_until = ? AND id IN ("+inList(len(ids))+")",
				append([]any{until, r.Status, held}, ids...)...)
			if err != nil {
				return err
			}
			renewed, err = queryIDs(ctx, tx, stmt{Query: "SELECT id FROM emails WHERE status = ? AND lease_until = ? AND id IN (" + inList(len(ids)) + ")",
				Args: append([]any{r.Status, until}, ids...)})
			return err
		})
		return renewed, err
	})
}

func (s *Store) RenewEvents(ctx context.Context, r backends.EventRenewal) ([]string, error) {
	return s.sql.RenewEvents(ctx, r, setLeaseStmt)
}

// setLeaseStmt sets the lease of the rows of table whose key column holds
// one of ids, which the transaction has locked.
func setLeaseStmt(table, key string, ids []string, until time.Time) stmt {
	args := sortedIDs(ids) // once each: an id may come twice
	return stmt{Query: "UPDATE " + table + " SET lease_until = ? WHERE " + key + " IN (" + inList(len(args)) + ")", Args: append([]any{until}, args...)}
}
