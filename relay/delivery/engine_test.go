package delivery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/internal/outboxtest"
	"github.com/genropy/postino/internal/smtptest"
)

// slowOutcomes is an outbox whose commits of delivery outcomes take long:
// each waits until the upstream has every message, or gives up.
type slowOutcomes struct {
	*bolt.Store
	upstream *smtptest.Server
	want     int
	gaveUp   atomic.Bool
}

func (s *slowOutcomes) Transition(ctx context.Context, t backends.Transition) error {
	if t.From == backends.StatusProcessing {
		deadline := time.Now().Add(15 * time.Second)
		for !s.gaveUp.Load() && len(s.upstream.Messages()) < s.want {
			if time.Now().After(deadline) {
				s.gaveUp.Store(true)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return s.Store.Transition(ctx, t)
}

// A session must go on to its next message while the outcome of the last
// is committed: on one connection, a session that waited would deliver one
// message per outbox commit.
func TestSessionDoesNotWaitForTheOutbox(t *testing.T) {
	sp, store := outboxtest.Open(t)
	ctx := context.Background()
	const n = 3
	for i := range n {
		id := fmt.Sprintf("m%d", i)
		outboxtest.Add(t, sp, store, &backends.Message{ID: id, Priority: 2,
			Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{"b@example.net"}}},
			[]byte("From: app@example.com\r\nSubject: hi\r\n\r\nhello\r\n"))
		for _, tr := range []backends.Transition{
			{ID: id, From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: time.Now().Add(time.Minute)},
			{ID: id, From: backends.StatusIntaking, To: backends.StatusReady, Route: DefaultRoute},
		} {
			if err := store.Transition(ctx, tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	upstream := smtptest.Start(t, smtptest.Options{})
	routes, err := NewRoutes([]Route{{Name: DefaultRoute, Smarthost: upstream.Addr, TLS: TLSNone, MaxConnections: 1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	slow := &slowOutcomes{Store: store, upstream: upstream, want: n}
	e := NewEngine(Config{
		MaxInFlight: 8, Lease: time.Minute, Poll: 10 * time.Millisecond, IdleTimeout: time.Second,
		ShutdownTimeout: time.Second, MXConnections: 1, Timeouts: DefaultTimeouts(),
		Retry:    Retry{Schedule: backoff.Schedule{First: time.Minute, Max: time.Hour}, MaxAge: time.Hour},
		HeloName: "relay.test", Owner: "test", Acknowledge: true,
	}, slow, sp, routes, dns{}, slog.New(slog.NewTextHandler(io.Discard, nil)), NewMetrics(prometheus.NewRegistry()), nil)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { e.Run(runCtx); close(done) }()
	outboxtest.WaitCounts(t, store, time.Minute, func(counts map[backends.Status]int) bool {
		return counts[backends.StatusSentAcknowledged] == n
	})
	stop()
	<-done
	if slow.gaveUp.Load() {
		t.Error("the session waited for the outbox before sending the next message")
	}
}
