// Package claimloop holds the loop of every stage that claims its work from
// a store (the intake worker, the delivery engine, the plugin dispatcher,
// the submissions reader), so that they keep one policy: claim; claim again
// at once after a claim that took all it had room for; otherwise wait for a
// wake, a freed slot (when the claim had no room) or the poll; after a
// claim that failed, wait out the outage back-off (backoff.Outages), which
// no wake cuts short: a store that is down is not hammered by every message
// that wakes its stages.
package claimloop

import (
	"context"
	"log/slog"
	"time"

	"github.com/genropy/postino/internal/backoff"
)

// Result is what a claim found, which says what the loop does next.
type Result int

const (
	// More: the claim took all it had room for, and more may be due: the
	// loop claims again at once.
	More Result = iota
	// Drained: the claim found all that was due: the loop waits for a
	// wake or the poll.
	Drained
	// NoRoom: the stage had no room to claim anything: the loop waits for
	// a slot to be freed, a wake or the poll.
	NoRoom
)

// Signals wake a stage's loop. Several loops may share one: a wake then
// wakes one of them.
type Signals struct {
	wake, freed chan struct{}
}

// NewSignals returns the signals of a stage.
func NewSignals() *Signals {
	return &Signals{wake: make(chan struct{}, 1), freed: make(chan struct{}, 1)}
}

// Wake tells the loop that work may be due.
func (s *Signals) Wake() { signal(s.wake) }

// Freed tells the loop that a slot was freed: a loop whose last claim had
// no room claims again.
func (s *Signals) Freed() { signal(s.freed) }

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Stage is what a loop runs. T is the type of the work handed over to the
// stage outside the store, if any.
type Stage[T any] struct {
	// Poll is how often the loop claims when nothing wakes it.
	Poll time.Duration
	// Claim claims what is due and hands it on.
	Claim func() (Result, error)
	// Report, when set, is told how each claim went (nil: it worked).
	// Without it the loop logs to Log when claims start failing, and
	// when they work again.
	Report func(err error)
	Log    *slog.Logger
	// What names the stage's claims in the log: "intake: claim accepted
	// messages".
	What string
	// Handed, when set, brings work handed over outside the store, which
	// Take does in the loop's turn; no claim follows it, since a claim
	// would find nothing it left behind.
	Handed <-chan T
	Take   func(T)
	// Polled, when set, runs at each poll, before the claim.
	Polled func()
}

// Run runs s until ctx ends, woken by sig.
func Run[T any](ctx context.Context, sig *Signals, s Stage[T]) {
	poll := time.NewTicker(s.Poll)
	defer poll.Stop()
	report := s.Report
	if report == nil {
		report = logChanges(s.Log, s.What)
	}
	var outages backoff.Outages
	last, claim := Drained, true
	for ctx.Err() == nil {
		if claim {
			// The claim answers every wake before it; one during it
			// stays, for what the claim may have missed.
			drain(sig.wake)
			res, err := s.Claim()
			report(err)
			if err != nil {
				if !sleep(ctx, outages.Failed()) {
					return
				}
				continue
			}
			outages.Recovered()
			if res == More {
				continue
			}
			last = res
		}
		claim = true
		var freed <-chan struct{}
		if last == NoRoom {
			freed = sig.freed
		}
		select {
		case <-ctx.Done():
		case <-sig.wake:
		case <-freed:
		case <-poll.C:
			if s.Polled != nil {
				s.Polled()
			}
		case w := <-s.Handed:
			s.Take(w)
			claim = false
		}
	}
}

func drain(c chan struct{}) {
	select {
	case <-c:
	default:
	}
}

// sleep waits d, and says false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// logChanges logs when claims start failing and when they work again, not
// every retry in between: a store down for a minute is one error in the log.
func logChanges(log *slog.Logger, what string) func(error) {
	failing := false
	return func(err error) {
		switch {
		case err != nil && !failing:
			log.Error(what+": failing; retrying with back-off", "error", err)
		case err != nil:
			log.Debug(what+": failed again", "error", err)
		case failing:
			log.Info(what + ": working again")
		}
		failing = err != nil
	}
}
