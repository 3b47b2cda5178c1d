package backends

import (
	"context"
	"time"
)

// BatchTallies counts, per batch, what its recipients' outcomes say of the
// list it is sent to, so that a batch whose list is bad stops itself (the
// relay's brake): every relay sharing the store adds to the same counts.
type BatchTallies interface {
	// TallyBatches adds each tally's counts to its batch's, in one
	// transaction.
	TallyBatches(ctx context.Context, tallies map[string]BatchTally) error
	// BatchTallies returns the tallies of codes; a batch nothing was
	// counted for is absent.
	BatchTallies(ctx context.Context, codes []string) (map[string]BatchTally, error)
	// TripBatch suspends the batch, as SuspendBatch does, and records why
	// in its tally, unless it is suspended already; it reports whether
	// this call suspended it, so that of relays tripping the same batch
	// at once one tells the plugins. ActivateBatch clears the tally: the
	// brake judges what is sent after an operator let the batch go on.
	TripBatch(ctx context.Context, code, reason string, at time.Time) (bool, error)
}

// BatchTally is what was counted of a batch.
type BatchTally struct {
	// Sent counts recipients accepted upstream; Hard, recipients with a
	// hard verdict (at RCPT or by DSN); Complaints, complaints.
	Sent       int64 `json:"sent"`
	Hard       int64 `json:"hard"`
	Complaints int64 `json:"complaints"`
	// Tripped says why the brake suspended the batch, and TrippedAt when;
	// empty while it has not.
	Tripped   string    `json:"tripped,omitempty"`
	TrippedAt time.Time `json:"tripped_at,omitzero"`
}

// Add adds o's counts to t's.
func (t *BatchTally) Add(o BatchTally) {
	t.Sent += o.Sent
	t.Hard += o.Hard
	t.Complaints += o.Complaints
}

// Zero reports whether t counts nothing.
func (t BatchTally) Zero() bool { return t.Sent == 0 && t.Hard == 0 && t.Complaints == 0 }
