// Package brake stops a batch whose list is bad: it counts, per batch, the
// recipients accepted, the hard verdicts and the complaints, adds the
// counts to the outbox's tallies once a second (shared by every relay of
// the store), and suspends the batch once a rate crosses its threshold.
package brake

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/outcome"
)

// EventSuspended is the notice plugins get when the brake suspends a
// batch, on the message whose outcome tripped it.
const EventSuspended = "BATCH-SUSPENDED"

// Store is what the brake needs of the outbox.
type Store interface {
	TallyBatches(ctx context.Context, tallies map[string]backends.BatchTally) error
	BatchTallies(ctx context.Context, codes []string) (map[string]backends.BatchTally, error)
	TripBatch(ctx context.Context, code, reason string, at time.Time) (bool, error)
	AddEvent(ctx context.Context, e *backends.Event) error
}

// Thresholds say when a batch stops.
type Thresholds struct {
	// Off keeps the counts (which list the batches) and stops none.
	Off bool
	// MinSent is how many recipients must have been tried (accepted or
	// refused as bad) before the rates count.
	MinSent int64
	// HardRate is the largest share of tried recipients with a hard
	// verdict; ComplaintRate, the largest share of accepted ones that
	// complained (Gmail's ceiling is 0.3 %).
	HardRate      float64
	ComplaintRate float64
}

// Check returns why a tally crosses the thresholds, or "".
func (th Thresholds) Check(t backends.BatchTally) string {
	tried := t.Sent + t.Hard
	if th.Off || tried < th.MinSent || tried == 0 {
		return ""
	}
	if hard := float64(t.Hard) / float64(tried); hard > th.HardRate {
		return fmt.Sprintf("hard verdicts %.1f%% (%d of %d) over the %.1f%% threshold", 100*hard, t.Hard, tried, 100*th.HardRate)
	}
	if t.Sent > 0 {
		if c := float64(t.Complaints) / float64(t.Sent); c > th.ComplaintRate {
			return fmt.Sprintf("complaints %.2f%% (%d of %d) over the %.2f%% threshold", 100*c, t.Complaints, t.Sent, 100*th.ComplaintRate)
		}
	}
	return ""
}

// Brake counts and trips. Its methods are safe for concurrent use.
type Brake struct {
	th    Thresholds
	store Store
	log   *slog.Logger
	// wake tells the callback stage that an event waits; may be nil.
	wake func()

	mu      sync.Mutex
	pending map[string]backends.BatchTally
	// last is, per batch, the message of its last count: the event's.
	last map[string]string
	// stopped holds, until when, the batches this relay saw tripped: the
	// messages of theirs it claimed before the outbox suspended them.
	stopped map[string]time.Time
	// unreported holds the events of batches this relay suspended that
	// the outbox did not take: each flush tries them again.
	unreported []*backends.Event
	tripped    prometheus.Counter
}

// stopFor is how long delivery hands back a tripped batch's messages it
// holds: past it, the outbox's suspension keeps them from claims.
const stopFor = time.Minute

// New makes a brake; Run flushes it. reg registers its metric.
func New(th Thresholds, store Store, log *slog.Logger, wake func(), reg prometheus.Registerer) *Brake {
	b := &Brake{th: th, store: store, log: log, wake: wake,
		pending: map[string]backends.BatchTally{}, last: map[string]string{}, stopped: map[string]time.Time{},
		tripped: prometheus.NewCounter(prometheus.CounterOpts{Name: "postino_batches_tripped_total",
			Help: "Batches the brake suspended (their hard-verdict or complaint rate crossed its threshold)."})}
	reg.MustRegister(b.tripped)
	return b
}

// Count adds to a batch's counts what a message's outcome says; a message
// of no batch counts nothing.
func (b *Brake) Count(batch, messageID string, t backends.BatchTally) {
	if batch == "" || t.Zero() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.pending[batch]
	cur.Add(t)
	b.pending[batch] = cur
	b.last[batch] = messageID
}

// Stopped reports whether the brake has stopped the batch: delivery
// hands back its messages claimed before the outbox suspended it.
func (b *Brake) Stopped(batch string) bool {
	if batch == "" {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	until, ok := b.stopped[batch]
	if ok && time.Now().After(until) {
		delete(b.stopped, batch)
		return false
	}
	return ok
}

// Run flushes the counts every interval until ctx ends, and once more
// then.
func (b *Brake) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			b.Flush(context.WithoutCancel(ctx))
			return
		case <-t.C:
			b.Flush(ctx)
		}
	}
}

// Flush adds the counts to the outbox's tallies, reads the batches'
// tallies back (other relays add to them too), and trips those over a
// threshold. Counts the outbox fails to take are kept for the next flush.
func (b *Brake) Flush(ctx context.Context) {
	b.mu.Lock()
	pending, last, unreported := b.pending, b.last, b.unreported
	b.pending, b.last, b.unreported = map[string]backends.BatchTally{}, map[string]string{}, nil
	b.mu.Unlock()
	for _, e := range unreported {
		b.report(ctx, e)
	}
	if len(pending) == 0 {
		return
	}
	if err := b.store.TallyBatches(ctx, pending); err != nil {
		b.log.Error("brake: cannot add the batches' counts to the outbox; kept for the next second", "error", err)
		b.restore(pending, last)
		return
	}
	codes := make([]string, 0, len(pending))
	for code := range pending {
		codes = append(codes, code)
	}
	tallies, err := b.store.BatchTallies(ctx, codes)
	if err != nil {
		b.log.Error("brake: cannot read the batches' tallies; they are read again at the next count", "error", err)
		return
	}
	for code, t := range tallies {
		if why := b.th.Check(t); why != "" && t.Tripped == "" {
			b.trip(ctx, code, last[code], why, t)
		}
	}
}

func (b *Brake) restore(pending map[string]backends.BatchTally, last map[string]string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for code, t := range pending {
		cur := b.pending[code]
		cur.Add(t)
		b.pending[code] = cur
		if _, ok := b.last[code]; !ok {
			b.last[code] = last[code]
		}
	}
}

// trip suspends the batch; the relay that did tells the plugins, on the
// message whose count tripped it.
func (b *Brake) trip(ctx context.Context, code, messageID, why string, t backends.BatchTally) {
	now := time.Now().UTC()
	reason := "suspended by the brake: " + why
	tripped, err := b.store.TripBatch(ctx, code, reason, now)
	if err != nil {
		// A store may suspend the batch and fail to hold every message of
		// it at once (tripped and an error): claims hold the rest, and
		// the plugins are told all the same.
		b.log.Error("brake: cannot suspend the batch wholly; tried again at its next count", "batch", code, "reason", why, "error", err)
		if !tripped {
			return
		}
	}
	b.mu.Lock()
	b.stopped[code] = now.Add(stopFor)
	b.mu.Unlock()
	if !tripped {
		return
	}
	b.log.Warn("batch suspended", "batch", code, "reason", why, "sent", t.Sent, "hard", t.Hard, "complaints", t.Complaints)
	b.tripped.Inc()
	e := backends.OutcomeEvent("", EventSuspended, reason, map[string]any{"batch_suspension": outcome.BatchSuspension{
		Batch: code, Reason: why, Sent: t.Sent, Hard: t.Hard, Complaints: t.Complaints,
		MinSent: b.th.MinSent, MaxHardRate: b.th.HardRate, MaxComplaintRate: b.th.ComplaintRate}})
	e.MessageID, e.At = messageID, now
	b.report(ctx, e)
}

// report records a suspension's event, or keeps it for the next flush:
// the batch stays suspended either way, and its plugins must hear why.
func (b *Brake) report(ctx context.Context, e *backends.Event) {
	if err := b.store.AddEvent(ctx, e); err != nil {
		b.log.Error("brake: the batch is suspended, but its event could not be recorded; tried again at the next count",
			"message", e.MessageID, "error", err)
		b.mu.Lock()
		b.unreported = append(b.unreported, e)
		b.mu.Unlock()
		return
	}
	if b.wake != nil {
		b.wake()
	}
}
