package delivery

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/internal/outboxtest"
	"github.com/genropy/postino/internal/smtptest"
	"github.com/genropy/postino/relay/intake"
)

// countedClaims is an outbox that tells how many messages each claim of
// READY messages took.
type countedClaims struct {
	*bolt.Store
	claims chan int
}

func (s *countedClaims) Claim(ctx context.Context, c backends.Claim) ([]*backends.Message, error) {
	msgs, err := s.Store.Claim(ctx, c)
	if c.From == backends.StatusReady {
		s.claims <- len(msgs)
	}
	return msgs, err
}

// Reserve takes a message straight into delivery only while the engine
// runs, has room, and found nothing due at its last claim.
func TestReserve(t *testing.T) {
	_, bs := outboxtest.Open(t)
	store := &countedClaims{Store: bs, claims: make(chan int, 100)}
	e := NewEngine(Config{MaxInFlight: 1, Lease: time.Minute, Poll: time.Hour, ShutdownTimeout: time.Second, Owner: "test"},
		store, nil, nil, dns{}, slog.New(slog.NewTextHandler(io.Discard, nil)), NewMetrics(prometheus.NewRegistry()), nil)
	ready := func() backends.Transition {
		return backends.Transition{ID: "m", From: backends.StatusAccepted, To: backends.StatusReady}
	}
	if tr := ready(); e.Reserve(&tr) {
		t.Fatal("reserved before the engine's first claim")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	if n := <-store.claims; n != 0 {
		t.Fatalf("the first claim took %d", n)
	}
	tr := ready()
	if !e.Reserve(&tr) {
		t.Fatal("no reservation with room and nothing due")
	}
	if len(tr.Then) != 1 || tr.Then[0].To != backends.StatusProcessing || !strings.Contains(tr.Then[0].Reason, "by test") ||
		tr.LeaseUntil.Before(time.Now().Add(30*time.Second)) {
		t.Errorf("reserved transition %+v: want a claim to PROCESSING under a lease", tr)
	}
	if tr := ready(); e.Reserve(&tr) {
		t.Error("reserved beyond MaxInFlight")
	}
	e.Release()
	if tr := ready(); !e.Reserve(&tr) {
		t.Error("the place given back was not reserved again")
	}
	e.Release()
	cancel()
	<-done
	if tr := ready(); e.Reserve(&tr) {
		t.Error("reserved after Run ended")
	}
}

// Messages the intake worker makes READY go to delivery in the same move,
// with no claim; one of a batch, which may be suspended, waits for a
// claim, and one due later waits in READY.
func TestIntakeStraightToDelivery(t *testing.T) {
	sp, bs := outboxtest.Open(t)
	store := &countedClaims{Store: bs, claims: make(chan int, 100)}
	upstream := smtptest.Start(t, smtptest.Options{})
	routes, err := NewRoutes([]Route{{Name: DefaultRoute, Smarthost: upstream.Addr, TLS: TLSNone, MaxConnections: 2}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := NewEngine(Config{
		MaxInFlight: 64, Lease: time.Minute, Poll: time.Hour, IdleTimeout: time.Second,
		ShutdownTimeout: time.Second, MXConnections: 1, Timeouts: DefaultTimeouts(),
		Retry:    Retry{Schedule: backoff.Schedule{First: time.Minute, Max: time.Hour}, MaxAge: time.Hour},
		HeloName: "relay.test", Owner: "test", Acknowledge: true,
	}, store, sp, routes, dns{}, log, NewMetrics(prometheus.NewRegistry()), nil)
	w := intake.NewWorker(intake.WorkerConfig{Concurrency: 2, Lease: time.Minute, Poll: time.Hour, Owner: "test",
		Ready: e.Wake, Delivery: e}, store, sp, func(*backends.Message) (string, error) { return DefaultRoute, nil }, log)
	ctx, cancel := context.WithCancel(context.Background())
	engineDone, workerDone := make(chan struct{}), make(chan struct{})
	go func() { e.Run(ctx); close(engineDone) }()
	go func() { w.Run(ctx); close(workerDone) }()
	defer func() { cancel(); <-workerDone; <-engineDone }()
	if n := <-store.claims; n != 0 {
		t.Fatalf("the first claim took %d", n)
	}

	const n = 10
	add := func(id string, m *backends.Message) {
		m.ID, m.Priority = id, 2
		m.Envelope = backends.Envelope{Sender: "app@example.com", Recipients: []string{"b@example.net"}}
		outboxtest.Add(t, sp, bs, m, []byte("From: app@example.com\r\nSubject: hi\r\n\r\nhello\r\n"))
		w.Accepted(m)
	}
	for i := range n {
		add("m"+string(rune('a'+i)), &backends.Message{})
	}
	add("batched", &backends.Message{Batch: "b1"})
	add("later", &backends.Message{DueAt: time.Now().Add(time.Hour)})
	outboxtest.WaitCounts(t, bs, time.Minute, func(c map[backends.Status]int) bool {
		return c[backends.StatusSentAcknowledged] == n+1 && c[backends.StatusReady] == 1
	})
	claimed := 0
	for len(store.claims) > 0 {
		claimed += <-store.claims
	}
	if claimed != 1 {
		t.Errorf("claims took %d messages; want only the batched one", claimed)
	}
	h, err := bs.History(context.Background(), "ma")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range h {
		got = append(got, string(e.Status))
	}
	if want := "ACCEPTED READY PROCESSING SENT CALLING-SENT-CALLBACK SENT-ACKNOWLEDGED"; strings.Join(got, " ") != want {
		t.Errorf("history %v, want %s", got, want)
	}
}
