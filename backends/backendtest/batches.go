package backendtest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

var batchTests = []test[batchStore]{
	{"SuspendedBatches", testSuspendedBatches},
	{"SuspendedBatchDoesNotStarve", testSuspendedBatchDoesNotStarve},
}

func testSuspendedBatches(t *testing.T, s batchStore) {
	ctx := context.Background()
	ready(t, s, "b1-a", backends.PriorityImmediate, at(0), at(0), "campaign")
	ready(t, s, "other", backends.PriorityNormal, at(0), at(0), "")
	if err := s.SuspendBatch(ctx, "campaign"); err != nil {
		t.Fatal(err)
	}
	// A message of the batch that becomes READY while it is suspended waits too.
	ready(t, s, "b1-b", backends.PriorityImmediate, at(0), at(time.Second), "campaign")
	codes, err := s.SuspendedBatches(ctx)
	if err != nil || !slices.Equal(codes, []string{"campaign"}) {
		t.Errorf("SuspendedBatches = %v, %v", codes, err)
	}
	if got := claimIDs(t, s, at(time.Minute), 10); !slices.Equal(got, []string{"other"}) {
		t.Errorf("claim with the batch suspended %v, want [other]", got)
	}
	listed, _, err := s.List(ctx, backends.ListQuery{Status: backends.StatusReady, Limit: 10})
	if err != nil || len(listed) != 2 {
		t.Errorf("suspended messages must still be listed as READY: %d, %v", len(listed), err)
	}
	if n, _ := s.Counts(ctx); n[backends.StatusReady] != 2 {
		t.Errorf("READY count %d, want 2", n[backends.StatusReady])
	}
	if err := s.ActivateBatch(ctx, "campaign"); err != nil {
		t.Fatal(err)
	}
	if got := claimIDs(t, s, at(time.Minute), 10); !slices.Equal(got, []string{"b1-a", "b1-b"}) {
		t.Errorf("claim after activation %v, want [b1-a b1-b]", got)
	}
	if codes, _ := s.SuspendedBatches(ctx); len(codes) != 0 {
		t.Errorf("SuspendedBatches after activation = %v", codes)
	}
	if err := s.SuspendBatch(ctx, "bad code!"); err == nil {
		t.Error("SuspendBatch accepted an invalid code")
	}
}

// testSuspendedBatchDoesNotStarve: however many messages of a suspended
// batch come first in claim order, a claim finds the others behind them.
func testSuspendedBatchDoesNotStarve(t *testing.T, s batchStore) {
	ctx := context.Background()
	if err := s.SuspendBatch(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		ready(t, s, fmt.Sprintf("held-%03d", i), backends.PriorityNormal, at(0), at(time.Duration(i)*time.Millisecond), "held")
	}
	ready(t, s, "behind", backends.PriorityNormal, at(time.Minute), at(time.Second), "")
	if got := claimIDs(t, s, at(2*time.Minute), 1); !slices.Equal(got, []string{"behind"}) {
		t.Errorf("claim behind 100 messages of a suspended batch: %v, want [behind]", got)
	}
	if err := s.ActivateBatch(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	if got := claimIDs(t, s, at(2*time.Minute), 200); len(got) != 100 {
		t.Errorf("claim after activation: %d messages, want the 100 of the batch", len(got))
	}
}
