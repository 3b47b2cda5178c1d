package delivery

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay/intake"
)

// Reserve takes a message straight into delivery only while the engine
// runs, has room, and found nothing due at its last claim.
func TestReserve(t *testing.T) {
	sp, bs := outboxtest.Open(t)
	store := outboxtest.CountClaims(bs, backends.StatusReady)
	e := testEngine(t, store, sp, Route{Name: DefaultRoute, Smarthost: "127.0.0.1:1", TLS: TLSNone, MaxConnections: 1}, time.Minute, time.Hour)
	e.cfg.MaxInFlight = 1
	ready := func() backends.Transition {
		return backends.Transition{ID: "m", From: backends.StatusAccepted, To: backends.StatusReady}
	}
	if tr := ready(); e.Reserve(&tr) {
		t.Fatal("reserved before the engine's first claim")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.Run(ctx); close(done) }()
	if n := <-store.Took; n != 0 {
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
	store := outboxtest.CountClaims(bs, backends.StatusReady)
	upstream := smtptest.Start(t, smtptest.Options{})
	e := testEngine(t, store, sp, Route{Name: DefaultRoute, Smarthost: upstream.Addr, TLS: TLSNone, MaxConnections: 2}, time.Minute, time.Hour)
	w := intake.NewWorker(intake.WorkerConfig{Concurrency: 2, Lease: time.Minute, Poll: time.Hour, Owner: "test",
		Delivery: e}, store, sp, func(*backends.Message) (string, error) { return DefaultRoute, nil },
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	engineDone, workerDone := make(chan struct{}), make(chan struct{})
	go func() { e.Run(ctx); close(engineDone) }()
	go func() { w.Run(ctx); close(workerDone) }()
	defer func() { cancel(); <-workerDone; <-engineDone }()
	if n := <-store.Took; n != 0 {
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
	for len(store.Took) > 0 {
		claimed += <-store.Took
	}
	if claimed != 1 {
		t.Errorf("claims took %d messages; want only the batched one", claimed)
	}
	if got, want := outboxtest.History(t, bs, "ma"), "ACCEPTED READY PROCESSING SENT CALLING-SENT-CALLBACK SENT-ACKNOWLEDGED"; got != want {
		t.Errorf("history %s, want %s", got, want)
	}
}
