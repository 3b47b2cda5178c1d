package mysql

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/genropy/postino/backends"
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
	err := s.tx(ctx, func(tx *sql.Tx) error {
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
