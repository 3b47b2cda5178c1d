package mysql

import (
	"context"
	"time"

	"github.com/genropy/postino/backends"
)

// minutesStmt sums the activity counters of each minute from since's on
// (PRIMARY, a range in its order).
func minutesStmt(since time.Time) stmt {
	return stmt{Query: "SELECT minute, activity, SUM(n) FROM email_activity WHERE minute >= ? GROUP BY minute, activity",
		Args: []any{backends.MinuteOf(since)}}
}

// Minutes sums the counters that every change keeps (email_activity, see
// changesStmts): a few rows per minute and activity, whatever the traffic.
func (s *Store) Minutes(ctx context.Context, since time.Time) ([]backends.Minute, error) {
	return s.sql.Minutes(ctx, minutesStmt(since))
}

func (s *Store) PruneMinutes(ctx context.Context, before time.Time) error {
	return s.sql.PruneMinutes(ctx, "DELETE FROM email_activity WHERE minute < ?", before)
}
