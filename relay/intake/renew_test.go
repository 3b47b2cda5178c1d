package intake_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/relay/intake"
)

// A message whose preparation takes longer than the lease stays with its
// worker: the lease is renewed, so a second worker on the same outbox does
// not prepare it again once restore has run.
func TestSlowIntakeKeepsItsClaim(t *testing.T) {
	sp, store := outboxtest.Open(t)
	outboxtest.Add(t, sp, store, &backends.Message{ID: "m0", Priority: 2,
		Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{"b@example.net"}}},
		[]byte("From: app@example.com\r\nSubject: hi\r\n\r\nhello\r\n"))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var routed atomic.Int32
	arrived, release := make(chan struct{}, 8), make(chan struct{})
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	defer releaseAll() // before the workers are waited for
	route := func(*backends.Message) (string, error) {
		routed.Add(1)
		arrived <- struct{}{}
		<-release
		return "default", nil
	}
	const lease = time.Second
	stopRestore := outboxtest.Restoring(t, store)
	defer stopRestore()
	for range 2 {
		w := intake.NewWorker(intake.WorkerConfig{Concurrency: 1, Lease: lease, Poll: 10 * time.Millisecond, Owner: "test",
			MaxAge: time.Hour}, store, sp, route, slog.New(slog.NewTextHandler(io.Discard, nil)))
		wg.Go(func() { w.Run(ctx) })
	}
	select {
	case <-arrived:
	case <-time.After(60 * time.Second):
		t.Fatal("the message was never prepared")
	}
	outboxtest.WaitRenewed(t, store, "m0", backends.StatusIntaking, time.Now().Add(3*lease), func() bool { return routed.Load() <= 1 })
	releaseAll()
	outboxtest.WaitCounts(t, store, time.Minute, func(counts map[backends.Status]int) bool {
		return counts[backends.StatusReady] == 1
	})
	if n := routed.Load(); n != 1 {
		t.Errorf("prepared %d times, want once", n)
	}
}
