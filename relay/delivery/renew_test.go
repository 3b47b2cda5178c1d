package delivery

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
)

// statusRows counts the history rows of a message in a status.
func statusRows(t *testing.T, h []backends.HistoryEntry, st backends.Status) int {
	t.Helper()
	n := 0
	for _, e := range h {
		if e.Status == st {
			n++
		}
	}
	return n
}

// A delivery slower than the lease keeps its message: its engine renews
// the lease, so neither it nor a second engine on the same outbox claims
// the message again while the upstream takes its time.
func TestSlowDeliveryKeepsItsClaim(t *testing.T) {
	sp, store := outboxtest.Open(t)
	addReady(t, sp, store, 1)
	upstream := smtptest.Start(t, smtptest.Options{})
	var deliveries atomic.Int32
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	defer releaseAll()
	upstream.OnData(func(smtptest.Message) error {
		deliveries.Add(1)
		arrived <- struct{}{}
		<-release
		return nil
	})
	stopRestore := outboxtest.Restoring(t, store)
	defer stopRestore()
	const lease = time.Second
	route := Route{Name: DefaultRoute, Smarthost: upstream.Addr, TLS: TLSNone, MaxConnections: 1}
	stopA := runEngine(t, store, sp, route, lease)
	defer stopA()
	stopB := runEngine(t, store, sp, route, lease)
	defer stopB()
	select {
	case <-arrived:
	case <-time.After(60 * time.Second):
		t.Fatal("the message never reached the upstream")
	}
	// Hold the delivery until the lease it was claimed under has been
	// renewed past three leases: unrenewed, it would have run out, been
	// restored and claimed again meanwhile.
	outboxtest.WaitRenewed(t, store, "m0", backends.StatusProcessing, time.Now().Add(3*lease), func() bool { return deliveries.Load() <= 1 })
	releaseAll()
	outboxtest.WaitCounts(t, store, time.Minute, func(counts map[backends.Status]int) bool {
		return counts[backends.StatusSentAcknowledged] == 1
	})
	if n := deliveries.Load(); n != 1 {
		t.Errorf("the upstream got the message %d times, want once", n)
	}
	h, err := store.History(context.Background(), "m0")
	if err != nil {
		t.Fatal(err)
	}
	if n := statusRows(t, h, backends.StatusProcessing); n != 1 {
		t.Errorf("the message was claimed %d times, want once: %+v", n, h)
	}
}

// A claim whose holder stops renewing it (its relay died) is taken over
// once its lease runs out, and not before.
func TestDeadHolderTakenOver(t *testing.T) {
	sp, store := outboxtest.Open(t)
	addReady(t, sp, store, 1)
	const lease = time.Second
	now := time.Now().UTC()
	claimedUntil := now.Add(lease)
	if ms, err := store.Claim(context.Background(), backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing,
		Now: now, LeaseUntil: claimedUntil, Limit: 1, Reason: "claimed by a relay that dies"}); err != nil || len(ms) != 1 {
		t.Fatalf("claim: %v, %v", ms, err)
	}
	upstream := smtptest.Start(t, smtptest.Options{})
	stopRestore := outboxtest.Restoring(t, store)
	defer stopRestore()
	stop := runEngine(t, store, sp, Route{Name: DefaultRoute, Smarthost: upstream.Addr, TLS: TLSNone, MaxConnections: 1}, lease)
	defer stop()
	outboxtest.WaitCounts(t, store, time.Minute, func(counts map[backends.Status]int) bool {
		return counts[backends.StatusSentAcknowledged] == 1
	})
	msgs := upstream.Messages()
	if len(msgs) != 1 {
		t.Fatalf("the upstream got %d messages, want 1", len(msgs))
	}
	if msgs[0].Received.Before(claimedUntil) {
		t.Errorf("taken over at %s, before the dead holder's lease ran out at %s", msgs[0].Received, claimedUntil)
	}
	h, _ := store.History(context.Background(), "m0")
	if n := statusRows(t, h, backends.StatusProcessing); n != 2 {
		t.Errorf("%d claims, want the dead holder's and the takeover: %+v", n, h)
	}
}
