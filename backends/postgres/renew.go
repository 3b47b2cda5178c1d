package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends"
)

// Renew moves the leases r renews with one statement, which returns the
// rows it changed.
func (s *Store) Renew(ctx context.Context, r backends.Renewal) ([]string, error) {
	return s.sql.Renew(ctx, r, func(held, until time.Time) ([]string, error) {
		rows, err := s.pool.Query(ctx, "UPDATE emails SET lease_until = $1 WHERE status = $2 AND lease_until = $3 AND id = ANY($4) RETURNING id",
			until, r.Status, held, r.IDs)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, pgx.RowTo[string])
	})
}

func (s *Store) RenewEvents(ctx context.Context, r backends.EventRenewal) ([]string, error) {
	return s.sql.RenewEvents(ctx, r, setLeaseStmt)
}

// setLeaseStmt sets the lease of the rows of table whose key column holds
// one of ids, which the transaction has locked.
func setLeaseStmt(table, key string, ids []string, until time.Time) stmt {
	return stmt{Query: "UPDATE " + table + " SET lease_until = $1 WHERE " + key + " = ANY($2)", Args: []any{until, ids}}
}
