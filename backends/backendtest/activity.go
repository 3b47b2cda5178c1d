package backendtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

var throughputTests = []test[throughputStore]{
	{"WhatHappens", testActivityCounts},
	{"Concurrent", testActivityConcurrent},
	{"PruneMinutes", testPruneMinutes},
}

// minutesSince reads the minutes from start's on, checks that each is a
// whole minute between start's and now, and returns their counts added up.
func minutesSince(t *testing.T, s backends.Throughput, start time.Time) map[backends.Activity]int {
	t.Helper()
	ms, err := s.Minutes(context.Background(), start)
	if err != nil {
		t.Fatalf("Minutes: %v", err)
	}
	total := map[backends.Activity]int{}
	for i, m := range ms {
		if !m.At.Equal(backends.MinuteOf(m.At)) || m.At.Before(backends.MinuteOf(start)) || m.At.After(time.Now()) ||
			i > 0 && !ms[i-1].At.Before(m.At) {
			t.Errorf("minute %d at %s, after %s, out of place (started at %s)", i, m.At, start, backends.MinuteOf(start))
		}
		for a, n := range m.Counts {
			total[a] += n
		}
	}
	return total
}

// wantCounts checks the counts of the minutes from start's on.
func wantCounts(t *testing.T, s backends.Throughput, start time.Time, want map[backends.Activity]int) {
	t.Helper()
	if got := minutesSince(t, s, start); !maps.Equal(got, want) {
		t.Errorf("counted %v, want %v", got, want)
	}
}

func transition(t *testing.T, s messageStore, tr backends.Transition) {
	t.Helper()
	if err := s.Transition(context.Background(), tr); err != nil {
		t.Fatalf("Transition(%s, %s -> %s): %v", tr.ID, tr.From, tr.To, err)
	}
}

// testActivityCounts: each creation counts as accepted, once; an outcome
// reached counts once, however the message comes back to it; a delivery
// attempt that ends in READY counts as deferred, a hand-back or a lease
// that runs out does not; nothing refused counts.
func testActivityCounts(t *testing.T, s throughputStore) {
	ctx := context.Background()
	start := time.Now()
	create(t, s, newMessage("a-dup"))
	dup := newMessage("a-dup")
	dup.EmlPath = "spool/a-dup.2.eml" // each submission has its own file
	if err := s.Create(ctx, dup); !errors.Is(err, backends.ErrDuplicate) {
		t.Fatalf("a second Create of a-dup: %v", err)
	}

	walk(t, s, "a-inv", backends.StatusInvalid)
	// A plugin call that fails brings it back to INVALID: no new outcome.
	move(t, s, "a-inv", backends.StatusInvalid, backends.StatusCallingInvalid, at(time.Hour))
	move(t, s, "a-inv", backends.StatusCallingInvalid, backends.StatusInvalid, at(time.Hour))
	err := s.Transition(ctx, backends.Transition{ID: "a-inv", From: backends.StatusProcessing, To: backends.StatusSent})
	if !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Fatalf("a transition from a status the message is not in: %v", err)
	}

	// Delivered with no plugin to tell: a chain through SENT, counted once.
	walk(t, s, "a-sent", backends.StatusProcessing)
	transition(t, s, backends.Transition{ID: "a-sent", From: backends.StatusProcessing, To: backends.StatusSent, AddAttempt: true,
		Then: []backends.Step{{To: backends.StatusCallingSent}, {To: backends.StatusSentAcknowledged}}, LeaseUntil: at(time.Hour)})

	walk(t, s, "a-def", backends.StatusProcessing)
	transition(t, s, backends.Transition{ID: "a-def", From: backends.StatusProcessing, To: backends.StatusReady, AddAttempt: true,
		DueAt: at(time.Hour), Reason: "deferred: 451 4.2.1 try later"})
	move(t, s, "a-def", backends.StatusReady, backends.StatusProcessing, at(time.Hour))
	// Handed back before any job ran: no attempt, no deferral.
	transition(t, s, backends.Transition{ID: "a-def", From: backends.StatusProcessing, To: backends.StatusReady, KeepReason: true,
		Reason: "handed back"})
	// A lease that runs out.
	move(t, s, "a-def", backends.StatusReady, backends.StatusProcessing, at(time.Hour))
	if n, err := s.Restore(ctx, time.Now()); err != nil || n != 1 {
		t.Fatalf("Restore: %d, %v; want the one message whose lease ran out", n, err)
	}

	walk(t, s, "a-fail", backends.StatusProcessing)
	move(t, s, "a-fail", backends.StatusProcessing, backends.StatusFailed, at(time.Hour))
	// An operator's retry, then cancel: a second failure.
	move(t, s, "a-fail", backends.StatusFailed, backends.StatusReady, at(time.Hour))
	move(t, s, "a-fail", backends.StatusReady, backends.StatusFailed, at(time.Hour))

	// A bounce moves its message when its event is claimed; a claim again
	// after a failed call does not count it again.
	sent(t, s, "a-bnc", "a-bnc-sent")
	now := at(2 * time.Hour)
	claimEvents(t, s, now)
	updateEvent(t, s, backends.EventUpdate{ID: "a-bnc-sent", From: backends.EventCalling, To: backends.EventAcked, At: now})
	if err := s.AddEvent(ctx, &backends.Event{ID: "a-bnc-1", MessageID: "a-bnc", Outcome: string(backends.StatusBounced), At: now}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got := claimEvents(t, s, now); len(got) != 1 {
			t.Fatalf("claimed %v, want the bounce", got)
		}
		updateEvent(t, s, backends.EventUpdate{ID: "a-bnc-1", From: backends.EventCalling, To: backends.EventPending, At: now})
	}

	wantCounts(t, s, start, map[backends.Activity]int{backends.ActivityAccepted: 6, backends.ActivityInvalid: 1,
		backends.ActivitySent: 2, backends.ActivityDeferred: 1, backends.ActivityFailed: 2, backends.ActivityBounced: 1})
	if ms, err := s.Minutes(ctx, time.Now().Add(2*time.Minute)); err != nil || len(ms) != 0 {
		t.Errorf("Minutes from a minute to come: %v, %v; want none", ms, err)
	}
}

// testActivityConcurrent: creates and outcomes of concurrent callers, which
// a store may write in one transaction, are each counted.
func testActivityConcurrent(t *testing.T, s throughputStore) {
	const n = 40
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("c-%d", i)
			if err := s.Create(context.Background(), newMessage(id)); err != nil {
				t.Errorf("Create(%s): %v", id, err)
				return
			}
			err := s.Transition(context.Background(), backends.Transition{ID: id, From: backends.StatusAccepted, To: backends.StatusInvalid,
				Reason: "no route"})
			if err != nil {
				t.Errorf("Transition(%s): %v", id, err)
			}
		})
	}
	wg.Wait()
	wantCounts(t, s, start, map[backends.Activity]int{backends.ActivityAccepted: n, backends.ActivityInvalid: n})
}

// testPruneMinutes: the minutes before the one given are forgotten, the
// others kept; counting goes on after.
func testPruneMinutes(t *testing.T, s throughputStore) {
	ctx := context.Background()
	start := time.Now()
	create(t, s, newMessage("p-1"))
	if err := s.PruneMinutes(ctx, start.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, start, map[backends.Activity]int{backends.ActivityAccepted: 1})
	if err := s.PruneMinutes(ctx, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, s, start, map[backends.Activity]int{})
	create(t, s, newMessage("p-2"))
	wantCounts(t, s, start, map[backends.Activity]int{backends.ActivityAccepted: 1})
}
