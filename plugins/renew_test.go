package plugins_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/plugins"
)

// held is a plugin that answers once its gate opens, and the file of the
// calls it gets. A test opens the gate when it ends (defer os.Remove), or
// waits for the plugin's timeout before its dispatchers stop.
func held(t *testing.T) (spec plugins.Spec, out, gate string) {
	t.Helper()
	gate = closedGate(t)
	spec, out = testPlugin(t, "hold-while", "TESTPLUGIN_GATE="+gate)
	spec.Timeout = wait
	return spec, out, gate
}

// openGate removes a gate: its plugin answers.
func openGate(t *testing.T, gate string) {
	t.Helper()
	if err := os.Remove(gate); err != nil {
		t.Fatal(err)
	}
}

// A plugin call slower than the lease keeps its event: the dispatcher
// renews the lease of the event and of its message, so neither it nor a
// second dispatcher on the same outbox calls the plugins again once
// restore has run, and the event is acknowledged once.
func TestSlowCallKeepsItsClaim(t *testing.T) {
	store := outboxtest.Store(t)
	seed(t, store, "slow", backends.StatusSent)
	spec, out, gate := held(t)
	defer os.Remove(gate)
	stopRestore := outboxtest.Restoring(t, store)
	defer stopRestore()
	const lease = time.Second
	for range 2 {
		runLeased(t, store, 10*time.Millisecond, lease, spec)
	}
	eventually(t, func() bool { return len(calls(t, out)) > 0 }, func() string { return "the plugin was never called" })
	// Hold the call until the lease it was claimed under has been renewed
	// past three leases: unrenewed, it would have run out, been restored and
	// claimed again meanwhile.
	past := time.Now().Add(3 * lease)
	outboxtest.WaitRenewed(t, store, "slow", backends.StatusCallingSent, past, func() bool { return len(calls(t, out)) == 1 })
	if es, err := store.Events(context.Background(), "slow"); err != nil || es[0].State != backends.EventCalling || !es[0].LeaseUntil.After(past) {
		t.Errorf("the event's lease was not renewed with its message's: %s, %v", eventsText(es), err)
	}
	openGate(t, gate)
	waitEvents(t, store, "slow", backends.EventAcked)
	if n := len(calls(t, out)); n != 1 {
		t.Errorf("the plugin was called %d times, want once", n)
	}
	if st, _ := history(t, store, "slow"); count(st, backends.StatusCallingSent) != 1 || st[len(st)-1] != backends.StatusSentAcknowledged {
		t.Errorf("history %v, want one claim, then acknowledged", st)
	}
}

// A dispatcher cut off from the outbox (its relay died, or lost the
// network) in the middle of a call loses its event once the event's lease
// runs out: another dispatcher takes it over and calls the plugins, and
// the result the first writes when it comes back is refused, since it
// names a lease that ran out.
func TestDeadDispatcherTakenOver(t *testing.T) {
	store := outboxtest.Store(t)
	seed(t, store, "cut", backends.StatusSent)
	specA, outA, gateA := held(t)
	specB, outB, gateB := held(t)
	defer os.Remove(gateA)
	defer os.Remove(gateB)
	const lease = time.Second
	a := &cutOff{Store: store}
	runLeased(t, a, 10*time.Millisecond, lease, specA)
	eventually(t, func() bool { return len(calls(t, outA)) > 0 }, func() string { return "the first dispatcher never called its plugin" })
	last := a.cut()
	stopRestore := outboxtest.Restoring(t, store)
	defer stopRestore()
	runLeased(t, store, 10*time.Millisecond, lease, specB)
	eventually(t, func() bool { return len(calls(t, outB)) > 0 }, func() string { return "the second dispatcher never took the event over" })
	if got := calls(t, outB)[0].ReceivedAt; got.Before(last) {
		t.Errorf("taken over at %s, before the lease of the dispatcher cut off ran out at %s", got, last)
	}
	a.heal()
	openGate(t, gateA)
	eventually(t, func() bool { return a.refused.Load() > 0 }, func() string { return "the first dispatcher's result was not refused" })
	if es, _ := store.Events(context.Background(), "cut"); es[0].State != backends.EventCalling {
		t.Errorf("the result of a lease that ran out was written: %s", eventsText(es))
	}
	if m, _ := store.Get(context.Background(), "cut"); m.Status != backends.StatusCallingSent {
		t.Errorf("the result of a lease that ran out moved the message to %s", m.Status)
	}
	openGate(t, gateB)
	evs := waitEvents(t, store, "cut", backends.EventAcked)
	if !slices.Equal(evs[0].Acked, []string{"test"}) {
		t.Errorf("acknowledged by %v, want [test]", evs[0].Acked)
	}
	st, _ := history(t, store, "cut")
	if count(st, backends.StatusCallingSent) != 2 || count(st, backends.StatusSentAcknowledged) != 1 {
		t.Errorf("history %v, want the claim cut off, the takeover, and one acknowledgement", st)
	}
}

// A plugin call that takes long holds its own event, not the dispatcher:
// events that come meanwhile are claimed and called, as a relay taking
// over a dead relay's events does while it waits on a slow plugin.
func TestSlowCallHoldsOnlyItsEvent(t *testing.T) {
	store := outboxtest.Store(t)
	slow, _, gate := held(t)
	slow.Outcomes = []string{"sent"}
	defer os.Remove(gate)
	fast, out := testPlugin(t, "ok")
	fast.Name, fast.Outcomes = "fast", []string{"failed"}
	seed(t, store, "slow", backends.StatusSent)
	runLeased(t, store, 10*time.Millisecond, time.Minute, slow, fast)
	eventually(t, func() bool {
		m, err := store.Get(context.Background(), "slow")
		return err == nil && m.Status == backends.StatusCallingSent
	}, func() string { return "the slow plugin was never called" })
	seed(t, store, "next", backends.StatusFailed)
	waitEvents(t, store, "next", backends.EventAcked)
	if n := len(calls(t, out)); n != 1 {
		t.Errorf("the plugin of the next event was called %d times, want once", n)
	}
	if es, _ := store.Events(context.Background(), "slow"); es[0].State != backends.EventCalling {
		t.Errorf("the slow call's event is %s, want still calling", eventsText(es))
	}
	openGate(t, gate)
	waitEvents(t, store, "slow", backends.EventAcked)
}

func count(st []backends.Status, s backends.Status) int {
	n := 0
	for _, x := range st {
		if x == s {
			n++
		}
	}
	return n
}

// errCut is what a cutOff answers while the dispatcher is cut off.
var errCut = errors.New("the outbox is out of reach (test)")

// cutOff is the outbox as one dispatcher reaches it: not at all between
// cut and heal, as when its relay dies or loses the network.
type cutOff struct {
	*bolt.Store
	// mu is held for reading by every call, and for writing by cut, which
	// so waits for the calls under way.
	mu      sync.RWMutex
	off     bool
	leaseMu sync.Mutex
	lease   time.Time // the latest lease the dispatcher claimed or renewed to
	// refused counts the results refused for the lease they named.
	refused atomic.Int32
}

// cut cuts the dispatcher off, and returns the latest lease it got: its
// claims run out then.
func (c *cutOff) cut() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = true
	return c.lease
}

func (c *cutOff) heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.off = false
}

// reach calls fn unless the dispatcher is cut off.
func (c *cutOff) reach(fn func() error) error {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.off {
		return errCut
	}
	return fn()
}

// leased notes a lease the dispatcher got.
func (c *cutOff) leased(until time.Time) {
	c.leaseMu.Lock()
	defer c.leaseMu.Unlock()
	if until.After(c.lease) {
		c.lease = until
	}
}

func (c *cutOff) Get(ctx context.Context, id string) (m *backends.Message, err error) {
	err = c.reach(func() error { m, err = c.Store.Get(ctx, id); return err })
	return m, err
}

func (c *cutOff) ClaimEvents(ctx context.Context, cl backends.EventClaim) (es []*backends.Event, err error) {
	err = c.reach(func() error {
		if es, err = c.Store.ClaimEvents(ctx, cl); len(es) > 0 {
			c.leased(cl.LeaseUntil)
		}
		return err
	})
	return es, err
}

func (c *cutOff) RenewEvents(ctx context.Context, r backends.EventRenewal) (ids []string, err error) {
	err = c.reach(func() error {
		if ids, err = c.Store.RenewEvents(ctx, r); len(ids) > 0 {
			c.leased(r.Until)
		}
		return err
	})
	return ids, err
}

func (c *cutOff) UpdateEvent(ctx context.Context, u backends.EventUpdate) (e *backends.Event, err error) {
	err = c.reach(func() error {
		e, err = c.Store.UpdateEvent(ctx, u)
		if errors.Is(err, backends.ErrLockNotAcquired) {
			c.refused.Add(1)
		}
		return err
	})
	return e, err
}
