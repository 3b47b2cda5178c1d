// Package plugins tells the app's own code what became of each message. The
// dispatcher claims outcome events from the outbox, in order per message,
// calls the status-callback plugins that want them (separate programs, run
// by hashicorp/go-plugin), and acknowledges each event once every one of
// them has. A plugin that fails is tried again with backoff; an event whose
// tries run out is parked until an operator replays it.
package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/claimloop"
	"github.com/genropy/postino/internal/lease"
	"github.com/genropy/postino/plugins/sdk"
)

// Store is what the dispatcher needs of the outbox.
type Store interface {
	Get(ctx context.Context, id string) (*backends.Message, error)
	ClaimEvents(ctx context.Context, c backends.EventClaim) ([]*backends.Event, error)
	UpdateEvent(ctx context.Context, u backends.EventUpdate) (*backends.Event, error)
	RenewEvents(ctx context.Context, r backends.EventRenewal) ([]string, error)
}

// Config tunes the dispatcher.
type Config struct {
	Poll time.Duration
	// Lease is how long an event stays calling without a sign of life: the
	// dispatcher renews it, and its message's, every third of it while the
	// plugins are called, and a dead relay's events go to another within it.
	Lease time.Duration
	Owner string
	// Concurrency bounds the events being dispatched at once.
	Concurrency int
	// Version is the relay's, told to plugins.
	Version string
}

// Dispatcher runs the callback stage.
type Dispatcher struct {
	cfg     Config
	store   Store
	log     *slog.Logger
	metrics *Metrics
	leases  *lease.Renewer
	runners []*runner
	sig     *claimloop.Signals

	// calling holds a token per event being handled, up to Concurrency;
	// the loop is woken when one is done. Events are claimed as slots
	// free up, not batch after batch: one slow plugin call does not keep
	// a relay from taking over the events of a relay that died.
	calling chan struct{}
	handles sync.WaitGroup
}

// NewDispatcher prepares the plugins; they start when Run does.
func NewDispatcher(cfg Config, store Store, specs []Spec, log *slog.Logger, m *Metrics) *Dispatcher {
	d := &Dispatcher{cfg: cfg, store: store, log: log, metrics: m, leases: lease.ForEvents(store, cfg.Lease, log), sig: claimloop.NewSignals(),
		calling: make(chan struct{}, cfg.Concurrency)}
	for _, s := range specs {
		d.runners = append(d.runners, newRunner(s, log, cfg.Version))
	}
	return d
}

// Wake tells the dispatcher that events are waiting.
func (d *Dispatcher) Wake() { d.sig.Wake() }

// Ready reports each plugin's health, for /readyz: a plugin is not well
// while its process is down, and while its last calls all failed (until
// one succeeds).
func (d *Dispatcher) Ready() map[string]error {
	out := map[string]error{}
	for _, r := range d.runners {
		out["plugin "+r.spec.Name] = r.state()
	}
	return out
}

// Run dispatches until ctx ends, then stops the plugins. A plugin that does
// not start is reported and tried again; the relay goes on meanwhile. The
// events being called when ctx ends are finished first, and their leases
// renewed until then.
func (d *Dispatcher) Run(ctx context.Context) {
	defer func() {
		for _, r := range d.runners {
			r.stop()
		}
	}()
	renewCtx, stopRenewing := context.WithCancel(context.Background())
	var renewer sync.WaitGroup
	renewer.Go(func() { d.leases.Run(renewCtx) })
	defer renewer.Wait()
	defer stopRenewing()
	for _, r := range d.runners {
		r.running()
	}
	claimloop.Run(ctx, d.sig, claimloop.Stage[struct{}]{
		Poll: d.cfg.Poll, Log: d.log, What: "callbacks: claims of events",
		Claim: func() (claimloop.Result, error) {
			free := cap(d.calling) - len(d.calling)
			if free == 0 {
				return claimloop.NoRoom, nil
			}
			n, err := d.dispatch(ctx, free)
			if n == free {
				return claimloop.More, err
			}
			return claimloop.Drained, err
		},
		Polled: func() {
			for _, r := range d.runners {
				if r.down() != nil {
					r.running() // a plugin down is started again in time
				}
			}
		},
	})
	d.handles.Wait()
}

// dispatch claims up to limit events and starts handling each.
func (d *Dispatcher) dispatch(ctx context.Context, limit int) (int, error) {
	now := time.Now().UTC()
	events, err := d.store.ClaimEvents(context.WithoutCancel(ctx), backends.EventClaim{
		Now: now, LeaseUntil: now.Add(d.cfg.Lease), Limit: limit, Reason: "calling plugins (" + d.cfg.Owner + ")",
	})
	if err != nil {
		return 0, err
	}
	for _, e := range events {
		hold := d.leases.Hold(e.ID, e.LeaseUntil)
		d.calling <- struct{}{}
		d.handles.Go(func() {
			d.handle(context.WithoutCancel(ctx), e, hold)
			<-d.calling
			// A slot is free, and claims take one event per message, the
			// first in line: the acknowledgement just made may have put
			// the next in line, which must not wait for the poll.
			d.sig.Wake()
		})
	}
	return len(events), nil
}

// handle calls the plugins that want an event and have not acknowledged it
// yet, and records the result under the lease it holds the event by.
func (d *Dispatcher) handle(ctx context.Context, e *backends.Event, hold *lease.Hold) {
	c, ok := d.call(ctx, e, hold)
	// The result names the leases the event may be under, one a renewal in
	// flight may be writing included.
	leases := d.leases.Release(hold)
	if !ok {
		return
	}
	u := d.result(e, c)
	err := lease.Try(leases, func(held time.Time) error {
		u.Held = held
		_, err := d.store.UpdateEvent(ctx, u)
		return err
	})
	switch {
	case errors.Is(err, backends.ErrLockNotAcquired):
		d.log.Warn("callbacks: the event's lease ran out before its result was recorded; the next claim calls its plugins again",
			"event", e.ID, "id", e.MessageID, "lease_until", leases[0])
	case err != nil:
		d.log.Error("callbacks: cannot record the event's result; the lease will return it", "event", e.ID, "error", err)
	}
}

// calls is what the plugins called answered: those that acknowledged the
// event, with those that did before, and the failures of the others.
type calls struct {
	wanted   bool // some plugin wanted the event
	acked    []string
	failures []string
	failed   []*runner
}

// call calls the plugins that want e and have not acknowledged it yet, one
// after another, while the lease of hold is kept; ok is false when the
// event cannot be called (its message unreadable) or its lease was lost,
// and its lease returns it.
func (d *Dispatcher) call(ctx context.Context, e *backends.Event, hold *lease.Hold) (c calls, ok bool) {
	var want []*runner
	for _, r := range d.runners {
		if r.wantsOutcome(e.Outcome) && !slices.Contains(e.Acked, r.spec.Name) {
			want = append(want, r)
		}
	}
	c.acked = slices.Clone(e.Acked)
	if c.acked == nil {
		c.acked = []string{}
	}
	c.wanted = len(want) > 0
	if !c.wanted {
		return c, true
	}
	m, err := d.store.Get(ctx, e.MessageID)
	if err != nil {
		d.log.Error("callbacks: cannot read the message of an event; the lease will return it", "event", e.ID, "id", e.MessageID, "error", err)
		return c, false
	}
	ev := sdk.ToProto(eventFor(e, m))
	for _, r := range want {
		if until, lost := d.leases.Until(hold); lost {
			// The event is restored, or another relay holds it: the next
			// claim calls these plugins.
			d.log.Warn("callbacks: the event's lease ran out; its plugins not called yet are left to the next claim",
				"event", e.ID, "id", e.MessageID, "lease_until", until)
			return c, false
		}
		start := time.Now()
		err := r.deliver(ctx, ev)
		d.metrics.observe(r.spec.Name, time.Since(start), err)
		if err != nil {
			c.failures = append(c.failures, fmt.Sprintf("plugin %s: %v", r.spec.Name, err))
			c.failed = append(c.failed, r)
			continue
		}
		c.acked = append(c.acked, r.spec.Name)
	}
	return c, true
}

// result is the update that records what the plugins that want e
// answered: acknowledged, tried again later, or parked.
func (d *Dispatcher) result(e *backends.Event, c calls) backends.EventUpdate {
	u := backends.EventUpdate{ID: e.ID, From: backends.EventCalling, Acked: c.acked}
	switch {
	case len(c.failures) == 0:
		u.To = backends.EventAcked
		u.Reason = "no plugin wants " + e.Outcome
		if c.wanted {
			u.Reason = "acknowledged by " + strings.Join(c.acked, ", ")
		}
	case d.exhausted(e, c.failed):
		u.To, u.AddAttempt = backends.EventParked, true
		u.LastError = strings.Join(c.failures, "; ")
		u.Reason = fmt.Sprintf("parked after %d tries: %s; replay it with postino events replay %s", e.Attempts+1, u.LastError, e.ID)
		d.metrics.parked.Inc()
		d.log.Error("event parked", "event", e.ID, "id", e.MessageID, "outcome", e.Outcome, "error", u.LastError)
	default:
		// The first failed plugin's schedule spaces the tries.
		u.To, u.AddAttempt = backends.EventPending, true
		u.LastError = strings.Join(c.failures, "; ")
		u.DueAt = time.Now().UTC().Add(c.failed[0].spec.Retry.Delay(e.Attempts + 1))
		u.Reason = fmt.Sprintf("%s; try %d at %s", u.LastError, e.Attempts+2, u.DueAt.Format(time.RFC3339))
		d.log.Warn("plugin failed; will try again", "event", e.ID, "id", e.MessageID, "error", u.LastError, "next", u.DueAt)
	}
	return u
}

// exhausted reports whether the event has used up the tries of one of the
// plugins that failed it.
func (d *Dispatcher) exhausted(e *backends.Event, failed []*runner) bool {
	for _, r := range failed {
		if r.spec.MaxAttempts > 0 && e.Attempts+1 >= r.spec.MaxAttempts {
			return true
		}
		if r.spec.MaxAge > 0 && time.Since(e.At) >= r.spec.MaxAge {
			return true
		}
	}
	return false
}

// eventFor is what plugins are told of an event: the message's state, and
// what the event's own details add (per-recipient results of the attempt,
// bounce and PEC fields, the stream of a SUPPRESSED message, an unsubscribe,
// a batch's suspension), in the same JSON vocabulary: a detail reaches
// plugins under the JSON name of its sdk.Event field.
func eventFor(e *backends.Event, m *backends.Message) *sdk.Event {
	out := &sdk.Event{
		EventID: e.ID, MessageID: e.MessageID, RFC822MessageID: m.MessageID, Outcome: e.Outcome, Reason: e.Reason,
		At: e.At.UTC().Format(time.RFC3339Nano), Attempts: m.Attempts, Sender: m.Envelope.Sender, Batch: m.Batch,
		Priority: m.Priority, Route: m.Route, DeliveryAttempt: e.Attempts + 1, Recipients: m.RecipientResults(),
	}
	if len(e.Details) > 0 {
		json.Unmarshal(e.Details, out)
		// The details may not change who and what the event is about.
		out.EventID, out.MessageID, out.Outcome, out.DeliveryAttempt = e.ID, e.MessageID, e.Outcome, e.Attempts+1
	}
	return out
}
