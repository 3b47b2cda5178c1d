package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
)

// Minutes reads the rows of a minute, an activity and a count that st
// selects into minutes, oldest first (backends.Throughput.Minutes).
func (s Store) Minutes(ctx context.Context, st Stmt) ([]backends.Minute, error) {
	rows, err := s.DB.Query(ctx, st.Query, st.Args...)
	if err != nil {
		return nil, fmt.Errorf("minutes: %w", err)
	}
	defer rows.Close()
	tally := backends.Tally{}
	for rows.Next() {
		var at time.Time
		var a backends.Activity
		var n int64
		if err := rows.Scan(&at, &a, &n); err != nil {
			return nil, fmt.Errorf("minutes: %w", err)
		}
		tally.Add(at, a, int(n))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("minutes: %w", err)
	}
	return tally.Minutes(), nil
}

// PruneMinutes runs query, which deletes the minutes before its one
// argument, the minute of before (backends.Throughput.PruneMinutes).
func (s Store) PruneMinutes(ctx context.Context, query string, before time.Time) error {
	if _, err := s.DB.Exec(ctx, query, backends.MinuteOf(before)); err != nil {
		return fmt.Errorf("prune minutes: %w", err)
	}
	return nil
}
