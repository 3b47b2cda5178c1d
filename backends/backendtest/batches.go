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
	{"Tallies", testBatchTallies},
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

// testBatchTallies: counts add up across calls, a trip suspends once and
// says why, and activation clears the tally.
func testBatchTallies(t *testing.T, s batchStore) {
	ctx := context.Background()
	if err := s.TallyBatches(ctx, map[string]backends.BatchTally{"camp": {Sent: 100, Hard: 3}, "other": {Sent: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.TallyBatches(ctx, map[string]backends.BatchTally{"camp": {Sent: 50, Hard: 7, Complaints: 1}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.BatchTallies(ctx, []string{"camp", "other", "none"})
	if err != nil || got["camp"].Sent != 150 || got["camp"].Hard != 10 || got["camp"].Complaints != 1 || got["other"].Sent != 1 {
		t.Fatalf("tallies %+v %v", got, err)
	}
	if _, ok := got["none"]; ok {
		t.Error("a batch never counted has a tally")
	}
	ready(t, s, "c1", backends.PriorityNormal, at(0), at(0), "camp")
	tripped, err := s.TripBatch(ctx, "camp", "hard verdicts 6.7% over 5%", at(time.Minute))
	if err != nil || !tripped {
		t.Fatalf("TripBatch = %v, %v", tripped, err)
	}
	if again, err := s.TripBatch(ctx, "camp", "again", at(2*time.Minute)); err != nil || again {
		t.Errorf("a second trip = %v, %v; want false: the batch is suspended already", again, err)
	}
	codes, _ := s.SuspendedBatches(ctx)
	if !slices.Equal(codes, []string{"camp"}) {
		t.Errorf("suspended %v", codes)
	}
	if got := claimIDs(t, s, at(time.Hour), 10); len(got) != 0 {
		t.Errorf("claimed %v from a tripped batch", got)
	}
	got, _ = s.BatchTallies(ctx, []string{"camp"})
	if c := got["camp"]; c.Tripped != "hard verdicts 6.7% over 5%" || !c.TrippedAt.Equal(at(time.Minute)) || c.Sent != 150 {
		t.Errorf("tally after the trip %+v", c)
	}
	if err := s.ActivateBatch(ctx, "camp"); err != nil {
		t.Fatal(err)
	}
	got, _ = s.BatchTallies(ctx, []string{"camp"})
	if c, ok := got["camp"]; ok && (!c.Zero() || c.Tripped != "") {
		t.Errorf("tally after activation %+v, want none", c)
	}
	if err := s.TallyBatches(ctx, map[string]backends.BatchTally{"bad code!": {Sent: 1}}); err == nil {
		t.Error("TallyBatches took an invalid code")
	}
}
