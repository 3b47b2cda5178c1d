package plugins_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/plugins"
)

// seedSent makes n messages in SENT, each with its pending SENT event.
func seedSent(b *testing.B, s backends.Outbox, n int) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				id := fmt.Sprintf("ev-%d", i)
				m := &backends.Message{ID: id, Priority: 2, EmlPath: "x.eml", Envelope: backends.Envelope{Sender: "a@example.com", Recipients: []string{"b@example.net"}}}
				steps := []backends.Transition{
					{From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: time.Now().Add(time.Hour)},
					{From: backends.StatusIntaking, To: backends.StatusReady},
					{From: backends.StatusReady, To: backends.StatusProcessing, LeaseUntil: time.Now().Add(time.Hour)},
					{From: backends.StatusProcessing, To: backends.StatusSent, Event: &backends.Event{ID: backends.NewEventID(), Outcome: "SENT"}},
				}
				if err := s.Create(ctx, m); err != nil {
					b.Error(err)
					return
				}
				for _, t := range steps {
					t.ID = id
					if err := s.Transition(ctx, t); err != nil {
						b.Error(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// BenchmarkWebhookDispatch measures the callback stage with the shipped
// webhook plugin and a local HTTP receiver: events acknowledged per second.
func BenchmarkWebhookDispatch(b *testing.B) {
	bin := filepath.Join(b.TempDir(), "webhook")
	if out, err := exec.Command("go", "build", "-o", bin, "../contrib/plugins/webhook").CombinedOutput(); err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	var got atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got.Add(1)
	}))
	defer srv.Close()
	store, err := bolt.Open(filepath.Join(b.TempDir(), "outbox.db"), bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	seedSent(b, store, b.N)
	d := plugins.NewDispatcher(plugins.Config{Poll: 10 * time.Millisecond, Lease: time.Minute, Owner: "bench", Concurrency: 64},
		store, []plugins.Spec{{Name: "webhook", Path: bin, Env: []string{"POSTINO_WEBHOOK_URL=" + srv.URL, "POSTINO_WEBHOOK_SECRET=s"},
			Timeout: 10 * time.Second, Retry: backoff.Schedule{First: time.Second, Max: time.Minute, Jitter: 0.2}}},
		slog.New(slog.NewTextHandler(io.Discard, nil)), plugins.NewMetrics(prometheus.NewRegistry()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b.ResetTimer()
	start := time.Now()
	go func() { d.Run(ctx); close(done) }()
	outboxtest.WaitCounts(b, store, 10*time.Minute, func(n map[backends.Status]int) bool {
		return n[backends.StatusSentAcknowledged] == b.N
	})
	elapsed := time.Since(start)
	b.StopTimer()
	cancel()
	<-done
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	if int(got.Load()) < b.N {
		b.Errorf("the receiver got %d of %d", got.Load(), b.N)
	}
}
