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
	{"Progress", testBatchProgress},
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
	if err := s.TallyBatches(ctx, map[string]backends.BatchTally{"camp": {Messages: 160, Sent: 100, Hard: 3}, "other": {Sent: 1}}); err != nil {
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
	if c := got["camp"]; c != (backends.BatchTally{Messages: 160}) {
		t.Errorf("tally after activation %+v, want only its 160 messages", c)
	}
	if err := s.TallyBatches(ctx, map[string]backends.BatchTally{"bad code!": {Sent: 1}}); err == nil {
		t.Error("TallyBatches took an invalid code")
	}
}

// testBatchProgress: the batches with a tally are listed in pages, a
// batch's messages counted by status and listed, alone or in a status.
func testBatchProgress(t *testing.T, s batchStore) {
	ctx := context.Background()
	var codes []string
	for i := range 5 {
		codes = append(codes, fmt.Sprintf("camp-%d", i))
	}
	tallies := map[string]backends.BatchTally{}
	for _, c := range codes {
		tallies[c] = backends.BatchTally{Messages: 1}
	}
	if err := s.TallyBatches(ctx, tallies); err != nil {
		t.Fatal(err)
	}
	var listed []string
	after := ""
	for pages := 0; pages < 5; pages++ {
		page, next, err := s.ListBatches(ctx, after, 2)
		if err != nil || len(page) > 2 {
			t.Fatalf("ListBatches page %v %v", page, err)
		}
		listed = append(listed, page...)
		if next == "" {
			break
		}
		after = next
	}
	if !slices.Equal(listed, codes) {
		t.Errorf("listed %v, want %v", listed, codes)
	}
	for i := range 3 {
		ready(t, s, fmt.Sprintf("p-ready-%d", i), backends.PriorityNormal, at(0), at(time.Duration(i)*time.Second), "camp-0")
	}
	m := newMessage("p-sent")
	m.Batch = "camp-0"
	advance(t, s, create(t, s, m), backends.StatusSentAcknowledged)
	ready(t, s, "p-other", backends.PriorityNormal, at(0), at(0), "camp-1")
	counts, err := s.BatchCounts(ctx, "camp-0")
	if err != nil || counts[backends.StatusReady] != 3 || counts[backends.StatusSentAcknowledged] != 1 || len(counts) != 2 {
		t.Errorf("BatchCounts = %v, %v", counts, err)
	}
	if counts, _ := s.BatchCounts(ctx, "none"); len(counts) != 0 {
		t.Errorf("counts of a batch without messages %v", counts)
	}
	var ids []string
	q := backends.ListQuery{Batch: "camp-0", Limit: 2}
	for pages := 0; pages < 5; pages++ {
		page, next, err := s.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page {
			ids = append(ids, m.ID)
		}
		if next == "" {
			break
		}
		q.After = next
	}
	slices.Sort(ids)
	if want := []string{"p-ready-0", "p-ready-1", "p-ready-2", "p-sent"}; !slices.Equal(ids, want) {
		t.Errorf("List of the batch %v, want %v", ids, want)
	}
	page, _, err := s.List(ctx, backends.ListQuery{Batch: "camp-0", Status: backends.StatusSentAcknowledged, Limit: 10})
	if err != nil || len(page) != 1 || page[0].ID != "p-sent" {
		t.Errorf("List of the batch's acknowledged messages: %d, %v", len(page), err)
	}
}
