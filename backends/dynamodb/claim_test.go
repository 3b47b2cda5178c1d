package dynamodb_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

// makeReady puts n messages named prefix-0000 … in READY, due at due, of
// batch, with callers at once.
func makeReady(t testing.TB, s backends.Outbox, prefix string, n, prio int, due time.Time, batch string) {
	t.Helper()
	ctx := context.Background()
	var next atomic.Int64
	parallel(t, 8, func() error {
		for {
			i := next.Add(1) - 1
			if i >= int64(n) {
				return nil
			}
			id := fmt.Sprintf("%s-%04d", prefix, i)
			if err := s.Create(ctx, &backends.Message{ID: id, Priority: prio, Batch: batch, EmlPath: "x.eml",
				CreatedAt: due.Add(-time.Hour).Add(time.Duration(i) * time.Millisecond)}); err != nil {
				return err
			}
			lease := time.Now().Add(time.Hour)
			for _, tr := range []backends.Transition{
				{ID: id, From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: lease},
				{ID: id, From: backends.StatusIntaking, To: backends.StatusReady, DueAt: due},
			} {
				if err := s.Transition(ctx, tr); err != nil {
					return err
				}
			}
		}
	})
}

// TestClaimReadsBounded: behind 1,000 READY messages of a suspended batch,
// first in claim order, and 500 of the first priority not due yet, a claim
// finds the one message it may take in a bounded number of requests: one
// query a shard, one for each later priority of each shard that meets a
// message not due (all of them here, at the first priority), the
// suspended batches, the transaction.
func TestClaimReadsBounded(t *testing.T) {
	ctx := context.Background()
	opts := freshTable(t, 0)
	counter := counted(&opts)
	s := openStore(t, opts)
	now := time.Now().UTC()
	makeReady(t, s, "held", 1000, backends.PriorityHigh, now.Add(-time.Hour), "campaign")
	makeReady(t, s, "later", 500, backends.PriorityImmediate, now.Add(time.Hour), "")
	// Suspended once they are READY: suspending holds them.
	if err := s.SuspendBatch(ctx, "campaign"); err != nil {
		t.Fatal(err)
	}
	makeReady(t, s, "behind", 1, backends.PriorityNormal, now.Add(-time.Minute), "")

	counter.reset()
	got, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now, LeaseUntil: now.Add(time.Minute), Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	calls, byOp := counter.total()
	t.Logf("claim behind 1000 suspended and 500 not due: %d requests (%s)", calls, byOp)
	if len(got) != 1 || got[0].ID != "behind-0000" {
		t.Fatalf("claimed %v, want behind-0000", ids(got))
	}
	if max := 8 + 8*3 + 2; calls > max {
		t.Errorf("the claim took %d requests, want at most %d", calls, max)
	}

	// Activated, the batch's messages are claimed, all of them.
	if err := s.ActivateBatch(ctx, "campaign"); err != nil {
		t.Fatal(err)
	}
	var claimed []string
	for {
		got, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now, LeaseUntil: now.Add(time.Minute), Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		claimed = append(claimed, ids(got)...)
	}
	if len(claimed) != 1000 || !slices.IsSorted(claimed) || claimed[0] != "held-0000" {
		t.Errorf("after activation claimed %d, sorted %v, want the 1000 of the batch in order", len(claimed), slices.IsSorted(claimed))
	}
	counts, err := s.Counts(ctx)
	if err != nil || counts[backends.StatusProcessing] != 1001 || counts[backends.StatusReady] != 500 {
		t.Errorf("counts %v, %v", counts, err)
	}
}

func ids(ms []*backends.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// TestTransitionAfterRenew: a worker that renewed its lease moves its
// message holding the renewed lease, though the store remembers the copy
// it wrote when it claimed it, under the lease before the renewal.
func TestTransitionAfterRenew(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, freshTable(t, 0))
	now := time.Now().UTC()
	makeReady(t, s, "renewed", 1, backends.PriorityNormal, now.Add(-time.Minute), "")
	held := now.Add(time.Minute)
	ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing,
		Now: now, LeaseUntil: held, Limit: 1})
	if err != nil || len(ms) != 1 {
		t.Fatalf("Claim = %d messages, %v; want 1", len(ms), err)
	}
	until := now.Add(time.Hour)
	if got, err := s.Renew(ctx, backends.Renewal{IDs: ids(ms), Status: backends.StatusProcessing,
		Held: held, Until: until}); err != nil || len(got) != 1 {
		t.Fatalf("Renew = %v, %v; want %v", got, err, ids(ms))
	}
	if err := s.Transition(ctx, backends.Transition{ID: ms[0].ID, From: backends.StatusProcessing, To: backends.StatusSent,
		At: time.Now().UTC(), Reason: "sent", Held: until}); err != nil {
		t.Fatalf("transition holding the renewed lease: %v", err)
	}
	if m, err := s.Get(ctx, ms[0].ID); err != nil || m.Status != backends.StatusSent {
		t.Errorf("after the transition: %+v, %v; want SENT", m, err)
	}
}
