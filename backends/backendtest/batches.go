package backendtest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

var batchTests = []test[batchStore]{
	{"SuspendedBatches", testSuspendedBatches},
	{"SuspendedBatchDoesNotStarve", testSuspendedBatchDoesNotStarve},
	{"Tallies", testBatchTallies},
	{"List", testBatchList},
	{"Progress", testBatchProgress},
	{"ConcurrentTrips", testConcurrentTrips},
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
// says why, and activation restarts the tally.
func testBatchTallies(t *testing.T, s batchStore) {
	ctx := context.Background()
	for _, add := range []map[string]backends.BatchTally{
		{"camp": {Messages: 160, Sent: 100, Hard: 3}, "other": {Sent: 1}},
		{"camp": {Sent: 50, Hard: 7, Complaints: 1}},
	} {
		if err := s.TallyBatches(ctx, add); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.BatchTallies(ctx, []string{"camp", "other", "none"})
	if err != nil || got["camp"] != (backends.BatchTally{Messages: 160, Sent: 150, Hard: 10, Complaints: 1}) || got["other"].Sent != 1 {
		t.Fatalf("tallies %+v %v", got, err)
	}
	if _, ok := got["none"]; ok {
		t.Error("a batch never counted has a tally")
	}
	ready(t, s, "c1", backends.PriorityNormal, at(0), at(0), "camp")
	if tripped, err := s.TripBatch(ctx, "camp", "hard verdicts 6.7% over 5%", at(time.Minute)); err != nil || !tripped {
		t.Fatalf("TripBatch = %v, %v", tripped, err)
	}
	if again, err := s.TripBatch(ctx, "camp", "again", at(2*time.Minute)); err != nil || again {
		t.Errorf("a second trip = %v, %v; want false: the batch is suspended already", again, err)
	}
	if codes, _ := s.SuspendedBatches(ctx); !slices.Equal(codes, []string{"camp"}) {
		t.Errorf("suspended %v", codes)
	}
	if got := claimIDs(t, s, at(time.Hour), 10); len(got) != 0 {
		t.Errorf("claimed %v from a tripped batch", got)
	}
	if c := tallyOf(t, s, "camp"); c.Tripped != "hard verdicts 6.7% over 5%" || !c.TrippedAt.Equal(at(time.Minute)) || c.Sent != 150 {
		t.Errorf("tally after the trip %+v", c)
	}
	if err := s.ActivateBatch(ctx, "camp"); err != nil {
		t.Fatal(err)
	}
	if c := tallyOf(t, s, "camp"); c != (backends.BatchTally{Messages: 160}) {
		t.Errorf("tally after activation %+v, want only its 160 messages", c)
	}
	if err := s.TallyBatches(ctx, map[string]backends.BatchTally{"bad code!": {Sent: 1}}); err == nil {
		t.Error("TallyBatches took an invalid code")
	}
}

func tallyOf(t *testing.T, s batchStore, code string) backends.BatchTally {
	t.Helper()
	got, err := s.BatchTallies(context.Background(), []string{code})
	if err != nil {
		t.Fatal(err)
	}
	return got[code]
}

// testBatchList: the batches with a tally are listed in pages, in code
// order.
func testBatchList(t *testing.T, s batchStore) {
	ctx := context.Background()
	var codes []string
	tallies := map[string]backends.BatchTally{}
	for i := range 5 {
		codes = append(codes, fmt.Sprintf("camp-%d", i))
		tallies[codes[i]] = backends.BatchTally{Messages: 1}
	}
	if err := s.TallyBatches(ctx, tallies); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for after, pages := "", 0; pages == 0 || after != "" && pages < 5; pages++ {
		page, next, err := s.ListBatches(ctx, after, 2)
		if err != nil || len(page) > 2 {
			t.Fatalf("ListBatches page %v %v", page, err)
		}
		listed, after = append(listed, page...), next
	}
	if !slices.Equal(listed, codes) {
		t.Errorf("listed %v, want %v", listed, codes)
	}
}

// testBatchProgress: a batch's messages are counted by status and listed,
// alone or in a status.
func testBatchProgress(t *testing.T, s batchStore) {
	ctx := context.Background()
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
	ids := listIDs(t, s, backends.ListQuery{Batch: "camp-0", Limit: 2})
	slices.Sort(ids)
	if want := []string{"p-ready-0", "p-ready-1", "p-ready-2", "p-sent"}; !slices.Equal(ids, want) {
		t.Errorf("List of the batch %v, want %v", ids, want)
	}
	if ids := listIDs(t, s, backends.ListQuery{Batch: "camp-0", Status: backends.StatusSentAcknowledged, Limit: 10}); !slices.Equal(ids, []string{"p-sent"}) {
		t.Errorf("List of the batch's acknowledged messages: %v", ids)
	}
}

// listIDs pages through a listing and returns the ids, in its order.
func listIDs(t *testing.T, s batchStore, q backends.ListQuery) []string {
	t.Helper()
	var ids []string
	for pages := 0; pages < 100; pages++ {
		page, next, err := s.List(context.Background(), q)
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
	return ids
}

// testConcurrentTrips: relays tripping a batch at once each run TripBatch;
// exactly one is told it suspended the batch, and the tally holds its
// reason.
func testConcurrentTrips(t *testing.T, s batchStore) {
	ctx := context.Background()
	const relays, rounds = 8, 10
	for round := range rounds {
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			winners = make(chan string, relays)
		)
		for r := range relays {
			wg.Go(func() {
				<-start
				reason := fmt.Sprintf("relay %d", r)
				tripped, err := s.TripBatch(ctx, "camp", reason, time.Now())
				if err != nil {
					t.Errorf("round %d: TripBatch: %v", round, err)
				}
				if tripped {
					winners <- reason
				}
			})
		}
		close(start)
		wg.Wait()
		close(winners)
		var won []string
		for w := range winners {
			won = append(won, w)
		}
		if len(won) != 1 {
			t.Fatalf("round %d: %d relays were told they tripped the batch (%v), want 1", round, len(won), won)
		}
		got, err := s.BatchTallies(ctx, []string{"camp"})
		if err != nil || got["camp"].Tripped != won[0] {
			t.Fatalf("round %d: tally %+v, %v; want tripped by %s", round, got["camp"], err, won[0])
		}
		if err := s.ActivateBatch(ctx, "camp"); err != nil {
			t.Fatal(err)
		}
	}
}
