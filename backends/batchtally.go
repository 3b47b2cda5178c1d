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
	// at once one tells the plugins. ActivateBatch zeroes the brake's
	// counts (all but Messages) and clears Tripped: the brake judges what
	// is sent after an operator let the batch go on.
	TripBatch(ctx context.Context, code, reason string, at time.Time) (bool, error)
	// ListBatches returns a page of the batches that have a tally, in code
	// order, and the cursor of the next page (empty when none).
	ListBatches(ctx context.Context, after string, limit int) ([]string, string, error)
	// BatchCounts returns how many of the batch's messages each status
	// holds, from the store's index of batches.
	BatchCounts(ctx context.Context, code string) (map[Status]int, error)
}

// BatchTally is what was counted of a batch.
type BatchTally struct {
	// Messages counts the messages the relays took into the batch.
	Messages int64 `json:"messages"`
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
	t.Messages += o.Messages
	t.Sent += o.Sent
	t.Hard += o.Hard
	t.Complaints += o.Complaints
}

// Zero reports whether t counts nothing.
func (t BatchTally) Zero() bool {
	return t.Messages == 0 && t.Sent == 0 && t.Hard == 0 && t.Complaints == 0
}

// Restart is the tally of a batch an operator activated: its message
// count, and nothing for the brake.
func (t BatchTally) Restart() BatchTally { return BatchTally{Messages: t.Messages} }
