package main

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

// Each kind's one transition must be a move the lifecycle allows, ending
// where the fill means it to.
func TestPathEndsWhereItsKindSays(t *testing.T) {
	f := &filler{now: time.Now().UTC()}
	for _, tc := range []struct {
		kind kind
		want backends.Status
	}{
		{kindHeld, backends.StatusReady},
		{kindDeferred, backends.StatusReady},
		{kindSent, backends.StatusSentAcknowledged},
		{kindFailed, backends.StatusFailedAcknowledged},
	} {
		m := &backends.Message{ID: "m", CreatedAt: f.now.Add(-time.Hour)}
		tr := f.path(m, tc.kind, rand.New(rand.NewPCG(1, 2)))
		if err := tr.Check(); err != nil {
			t.Errorf("kind %d: %v", tc.kind, err)
		}
		if got := tr.Final(); got != tc.want {
			t.Errorf("kind %d ends %s, want %s", tc.kind, got, tc.want)
		}
		if tc.kind == kindDeferred && !tr.DueAt.After(f.now.Add(time.Hour-time.Second)) {
			t.Errorf("a deferred message is due at %s, within the hour", tr.DueAt)
		}
	}
}

func TestKindsMix(t *testing.T) {
	f := &filler{o: options{n: 100000, held: 5000}}
	count := map[kind]int{}
	for i := range f.o.n {
		count[f.kindOf(i)]++
	}
	if count[kindHeld] != 5000 || count[kindDeferred] < 80000 || count[kindSent] < 9000 || count[kindFailed] < 1800 {
		t.Errorf("mix %v: want 5000 held, mostly deferred, about 10%% sent and 2%% failed", count)
	}
}
