package brake

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/outboxtest"
)

func TestThresholds(t *testing.T) {
	th := Thresholds{MinSent: 200, HardRate: 0.05, ComplaintRate: 0.003}
	tests := []struct {
		tally backends.BatchTally
		trips bool
	}{
		{backends.BatchTally{Sent: 100, Hard: 50}, false}, // too few tried
		{backends.BatchTally{Sent: 190, Hard: 10}, false}, // 5.0 %: not over
		{backends.BatchTally{Sent: 189, Hard: 11}, true},  // 5.5 %
		{backends.BatchTally{Sent: 1000, Complaints: 3}, false},
		{backends.BatchTally{Sent: 1000, Complaints: 4}, true},
		{backends.BatchTally{}, false},
	}
	for _, tc := range tests {
		if why := th.Check(tc.tally); (why != "") != tc.trips {
			t.Errorf("%+v: %q", tc.tally, why)
		}
	}
}

// TestTrip: counts of two relays add up in the outbox; the batch that
// crosses a threshold is suspended once, with its reason and one event,
// and this relay stops handing out its messages; another batch goes on.
func TestTrip(t *testing.T) {
	store := outboxtest.Store(t)
	ctx := context.Background()
	for _, id := range []string{"m1", "m2"} {
		if err := store.Create(ctx, &backends.Message{ID: id, Batch: "camp", EmlPath: "outbox:" + id,
			Envelope: backends.Envelope{Sender: "a@example.com", Recipients: []string{"b@example.net"}}}); err != nil {
			t.Fatal(err)
		}
	}
	th := Thresholds{MinSent: 10, HardRate: 0.1, ComplaintRate: 0.01}
	log := slog.New(slog.DiscardHandler)
	reg := prometheus.NewRegistry()
	a, b := New(th, store, log, nil, reg), New(th, store, log, nil, prometheus.NewRegistry())
	a.Count("camp", "m1", backends.BatchTally{Sent: 5})
	a.Count("", "x", backends.BatchTally{Sent: 5})
	a.Count("other", "m2", backends.BatchTally{Sent: 20})
	b.Count("camp", "m2", backends.BatchTally{Sent: 4, Hard: 1})
	a.Flush(ctx)
	b.Flush(ctx)
	if codes, _ := store.SuspendedBatches(ctx); len(codes) != 0 {
		t.Fatalf("suspended %v at 1 hard of 10", codes)
	}
	a.Count("camp", "m1", backends.BatchTally{Hard: 1})
	a.Flush(ctx)
	codes, _ := store.SuspendedBatches(ctx)
	if !slices.Equal(codes, []string{"camp"}) {
		t.Fatalf("suspended %v, want [camp] at 2 hard of 11", codes)
	}
	if !a.Stopped("camp") || a.Stopped("other") || b.Stopped("camp") {
		t.Error("Stopped: the relay that tripped camp stops it, and only it")
	}
	tallies, _ := store.BatchTallies(ctx, []string{"camp"})
	if c := tallies["camp"]; c.Sent != 9 || c.Hard != 2 || c.Tripped == "" {
		t.Errorf("tally %+v", c)
	}
	// b sees it tripped: no second suspension, no second event.
	b.Count("camp", "m2", backends.BatchTally{Hard: 5})
	b.Flush(ctx)
	var events []*backends.Event
	for _, id := range []string{"m1", "m2"} {
		es, _ := store.Events(ctx, id)
		events = append(events, es...)
	}
	if len(events) != 1 || events[0].Outcome != EventSuspended || events[0].MessageID != "m1" {
		t.Errorf("events %+v, want one BATCH-SUSPENDED on m1", events)
	}
	if n := testutil.ToFloat64(a.tripped); n != 1 {
		t.Errorf("postino_batches_tripped_total = %v", n)
	}
}

// failingEvents is the outbox whose AddEvent fails while fail is set.
type failingEvents struct {
	Store
	fail bool
}

func (f *failingEvents) AddEvent(ctx context.Context, e *backends.Event) error {
	if f.fail {
		return errors.New("outbox unreachable")
	}
	return f.Store.AddEvent(ctx, e)
}

// TestTripEventRetried: a batch suspended while the outbox refused its
// event still reaches the plugins, at the next flush, once.
func TestTripEventRetried(t *testing.T) {
	store := outboxtest.Store(t)
	ctx := context.Background()
	if err := store.Create(ctx, &backends.Message{ID: "m1", Batch: "camp", EmlPath: "outbox:m1",
		Envelope: backends.Envelope{Sender: "a@example.com", Recipients: []string{"b@example.net"}}}); err != nil {
		t.Fatal(err)
	}
	f := &failingEvents{Store: store, fail: true}
	b := New(Thresholds{MinSent: 1, HardRate: 0.1, ComplaintRate: 0.01}, f, slog.New(slog.DiscardHandler), nil, prometheus.NewRegistry())
	b.Count("camp", "m1", backends.BatchTally{Sent: 1, Hard: 1})
	b.Flush(ctx)
	if codes, _ := store.SuspendedBatches(ctx); !slices.Equal(codes, []string{"camp"}) {
		t.Fatalf("suspended %v, want [camp]", codes)
	}
	if es, _ := store.Events(ctx, "m1"); len(es) != 0 {
		t.Fatalf("events %+v while the outbox refused them", es)
	}
	f.fail = false
	b.Flush(ctx)
	b.Flush(ctx)
	es, _ := store.Events(ctx, "m1")
	if len(es) != 1 || es[0].Outcome != EventSuspended {
		t.Errorf("events %+v, want one BATCH-SUSPENDED", es)
	}
}
