package claimloop

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/genropy/postino/internal/testrig/logtest"
)

// stage is a stage whose claims return what the test scripts, and which
// counts its claims, takes and polls.
type stage struct {
	mu      sync.Mutex
	results []any // Result or error, one a claim; Drained once used up
	claims  []time.Duration
	taken   []string
	polls   int
	start   time.Time
	// during, when set, runs inside the first claim.
	during func()
}

func (s *stage) claim() (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.claims = append(s.claims, time.Since(s.start))
	if len(s.claims) == 1 && s.during != nil {
		s.during()
	}
	if len(s.results) == 0 {
		return Drained, nil
	}
	r := s.results[0]
	s.results = s.results[1:]
	if err, ok := r.(error); ok {
		return Drained, err
	}
	return r.(Result), nil
}

func (s *stage) counts() (claims, taken, polls int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.claims), len(s.taken), s.polls
}

// TestRun: the loop's policy, step by step, on a fake clock: after each
// step every goroutine of the loop is blocked, and the counts are what
// the step must have caused.
func TestRun(t *testing.T) {
	errDown := errors.New("store down")
	type step struct {
		name string
		do   func(sig *Signals, handed chan string)
		// claims, taken and polls are the counts after the step.
		claims, taken, polls int
	}
	cases := []struct {
		name       string
		results    []any
		wakeDuring bool
		steps      []step
	}{
		{"a full claim is followed by another at once", []any{More, More, Drained}, false, []step{
			{"start", nil, 3, 0, 0},
		}},
		{"a drained claim waits for a wake", []any{Drained}, false, []step{
			{"start", nil, 1, 0, 0},
			{"wake", func(sig *Signals, _ chan string) { sig.Wake() }, 2, 0, 0},
		}},
		{"a drained claim waits for the poll", []any{Drained}, false, []step{
			{"start", nil, 1, 0, 0},
			{"half a poll", func(*Signals, chan string) { time.Sleep(500 * time.Millisecond) }, 1, 0, 0},
			{"the poll", func(*Signals, chan string) { time.Sleep(500 * time.Millisecond) }, 2, 0, 1},
		}},
		{"a freed slot ends the wait of a claim that had no room", []any{NoRoom, Drained}, false, []step{
			{"start", nil, 1, 0, 0},
			{"freed", func(sig *Signals, _ chan string) { sig.Freed() }, 2, 0, 0},
			// The claim found all that was due: a slot freed now is no
			// reason to claim.
			{"freed again", func(sig *Signals, _ chan string) { sig.Freed() }, 2, 0, 0},
		}},
		{"a failed claim backs off, and no wake cuts the back-off short", []any{errDown, errDown, Drained}, false, []step{
			{"start", nil, 1, 0, 0},
			{"wake", func(sig *Signals, _ chan string) { sig.Wake() }, 1, 0, 0},
			{"the first back-off (100ms ±20%)", func(*Signals, chan string) { time.Sleep(121 * time.Millisecond) }, 2, 0, 0},
			{"wake in the second", func(sig *Signals, _ chan string) { sig.Wake() }, 2, 0, 0},
			{"the second back-off (200ms ±20%)", func(*Signals, chan string) { time.Sleep(241 * time.Millisecond) }, 3, 0, 0},
			{"wake once it works", func(sig *Signals, _ chan string) { sig.Wake() }, 4, 0, 0},
		}},
		{"handed work is taken, and no claim follows it", []any{Drained}, false, []step{
			{"start", nil, 1, 0, 0},
			{"handed", func(_ *Signals, h chan string) { h <- "m1" }, 1, 1, 0},
			{"wake", func(sig *Signals, _ chan string) { sig.Wake() }, 2, 1, 0},
		}},
		{"a wake during a claim is answered by another claim", []any{Drained}, true, []step{
			{"start", nil, 2, 0, 0},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &stage{results: tc.results, start: time.Now()}
				sig, handed := NewSignals(), make(chan string)
				if tc.wakeDuring {
					s.during = sig.Wake
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() {
					defer close(done)
					Run(ctx, sig, Stage[string]{Poll: time.Second, Claim: s.claim, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
						What: "test", Handed: handed,
						Take:   func(w string) { s.mu.Lock(); s.taken = append(s.taken, w); s.mu.Unlock() },
						Polled: func() { s.mu.Lock(); s.polls++; s.mu.Unlock() }})
				}()
				defer func() { cancel(); <-done }()
				for _, st := range tc.steps {
					if st.do != nil {
						st.do(sig, handed)
					}
					synctest.Wait()
					if c, tk, p := s.counts(); c != st.claims || tk != st.taken || p != st.polls {
						t.Errorf("after %s: %d claims (at %v), %d taken, %d polls; want %d, %d, %d",
							st.name, c, s.claims, tk, p, st.claims, st.taken, st.polls)
						return
					}
				}
			})
		})
	}
}

// TestLogChanges: the default report logs when claims start failing and
// when they work again, not at every failure.
func TestLogChanges(t *testing.T) {
	log, b := logtest.Logger()
	report := logChanges(log, "test claims")
	for _, err := range []error{nil, errors.New("down"), errors.New("down"), errors.New("down"), nil, nil, errors.New("down again")} {
		report(err)
	}
	if n := b.Count("level=ERROR"); n != 2 {
		t.Errorf("%d errors logged; want 2 (one per outage):\n%s", n, b.String())
	}
	if n := b.Count("working again"); n != 1 {
		t.Errorf("%d recoveries logged; want 1:\n%s", n, b.String())
	}
}
