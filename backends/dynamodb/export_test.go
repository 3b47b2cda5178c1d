package dynamodb

import (
	"context"
	"time"
)

// SweepSpooling gives up, as Restore does at now, on the bytes that have
// waited for their row too long.
func (s *Store) SweepSpooling(ctx context.Context, now time.Time) error {
	return s.sweepSpooling(ctx, now)
}
