package sqlstore

import (
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
)

// MinuteRows is a SQL store's result of rows of a minute, an activity and
// a count (database/sql's and pgx's alike).
type MinuteRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ReadMinutes reads rows of a minute, an activity and a count into
// minutes, oldest first.
func ReadMinutes(rows MinuteRows) ([]backends.Minute, error) {
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
