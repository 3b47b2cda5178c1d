package delivery

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/internal/journal"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
)

// An outcome the outbox fails to write is written again until it lands:
// the message, accepted upstream, is not sent again when its lease runs
// out.
func TestOutcomeKeptUntilItLands(t *testing.T) {
	sp, store := outboxtest.Open(t)
	addReady(t, sp, store, 1)
	upstream := smtptest.Start(t, smtptest.Options{})
	var deliveries atomic.Int32
	upstream.OnData(func(smtptest.Message) error { deliveries.Add(1); return nil })
	flaky := &outboxtest.Hiccup{Store: store}
	const failures = 5
	flaky.Failures.Store(failures)
	j, err := journal.Open(filepath.Join(t.TempDir(), "outcomes.db"), flaky, journal.Options{
		Retry: backoff.Schedule{First: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ctx, cancel := context.WithCancel(context.Background())
	replayed := make(chan struct{})
	go func() { j.Run(ctx); close(replayed) }()
	defer func() { cancel(); <-replayed }()
	stopRestore := outboxtest.Restoring(t, store)
	defer stopRestore()
	const lease = 2 * time.Second
	stop := runEngineWith(t, flaky, sp, Route{Name: DefaultRoute, Smarthost: upstream.Addr, TLS: TLSNone, MaxConnections: 1}, lease, j)
	defer stop()
	outboxtest.WaitCounts(t, store, time.Minute, func(counts map[backends.Status]int) bool {
		return counts[backends.StatusSentAcknowledged] == 1
	})
	if n := flaky.Failures.Load(); n >= 0 {
		t.Fatalf("the outbox failed %d outcome writes, want %d", failures-n-1, failures)
	}
	if n := deliveries.Load(); n != 1 {
		t.Errorf("the upstream got the message %d times, want once", n)
	}
	h, err := store.History(context.Background(), "m0")
	if err != nil {
		t.Fatal(err)
	}
	sent := 0
	for _, e := range h {
		if e.Status == backends.StatusSent {
			sent++
		}
	}
	if sent != 1 {
		t.Errorf("%d SENT history rows, want 1: %+v", sent, h)
	}
}
