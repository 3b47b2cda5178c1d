package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

// readyIn makes a READY message of batch.
func readyIn(t *testing.T, s *countedStore, id, batch string) {
	t.Helper()
	ctx := context.Background()
	m := &backends.Message{ID: id, Batch: batch, Priority: 2, EmlPath: "outbox:" + id,
		Envelope: backends.Envelope{Sender: "a@example.com", Recipients: []string{"b@example.net"}}}
	if err := s.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []backends.Transition{
		{ID: id, From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: time.Now().Add(time.Minute)},
		{ID: id, From: backends.StatusIntaking, To: backends.StatusReady, Route: "default"},
	} {
		if err := s.Transition(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
}

func decodeBody[T any](t *testing.T, code int, body []byte) T {
	t.Helper()
	var out T
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	if err := json.Unmarshal(body, &out); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return out
}

// TestBatches: batches are listed with their progress and the brake's
// rates against its thresholds; a held message says by which batch; a
// cancel ends the waiting messages with the reason, and holds the rest.
func TestBatches(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	for _, id := range []string{"n1", "n2", "n3"} {
		readyIn(t, s, id, "news")
	}
	readyIn(t, s, "o1", "other")
	readyIn(t, s, "plain", "")
	if err := s.TallyBatches(ctx, map[string]backends.BatchTally{"news": {Messages: 3, Sent: 190, Hard: 10}, "other": {Messages: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SuspendBatch(ctx, "news"); err != nil {
		t.Fatal(err)
	}
	h := NewHandler(s, Options{Thresholds: Thresholds{MinSent: 200, MaxHardRate: 0.05, MaxComplaintRate: 0.003}})

	w := serve(h, "GET", "localhost", "/v1/batches", "")
	list := decodeBody[BatchList](t, w.Code, w.Body.Bytes())
	if len(list.Batches) != 2 || list.Batches[0].Code != "news" || list.Batches[1].Code != "other" {
		t.Fatalf("batches %+v", list.Batches)
	}
	news := list.Batches[0]
	if !news.Suspended || news.Progress.Held != 3 || news.Progress.Waiting != 0 || news.Progress.Messages != 3 ||
		news.Brake.HardRate != 0.05 || news.Brake.MaxHardRate != 0.05 || news.Brake.MinSent != 200 {
		t.Errorf("news %+v", news)
	}
	if o := list.Batches[1]; o.Suspended || o.Progress.Waiting != 1 {
		t.Errorf("other %+v", o)
	}

	w = serve(h, "GET", "localhost", "/v1/messages?batch=news", "")
	msgs := decodeBody[MessageList](t, w.Code, w.Body.Bytes())
	if len(msgs.Messages) != 3 || msgs.Messages[0].HeldBy != "news" || msgs.Messages[0].Batch != "news" {
		t.Errorf("queue list --batch news: %+v", msgs.Messages)
	}

	if w := serve(h, "POST", "localhost", "/v1/batches/other/cancel", ""); w.Code != http.StatusBadRequest {
		t.Errorf("a cancel without a reason: %d %s", w.Code, w.Body)
	}
	w = serve(h, "POST", "localhost", "/v1/batches/other/cancel?reason=wrong+list", "")
	res := decodeBody[CancelResult](t, w.Code, w.Body.Bytes())
	if res.Cancelled != 1 {
		t.Errorf("cancelled %d, want 1", res.Cancelled)
	}
	o, _ := s.Get(ctx, "o1")
	evs, _ := s.Events(ctx, "o1")
	if o.Status != backends.StatusFailed || len(evs) != 1 || evs[0].Reason != o.Reason || o.Reason != "cancelled with its batch other by an operator: wrong list" {
		t.Errorf("o1 %s %q, events %+v", o.Status, o.Reason, evs)
	}
	if p, _ := s.Get(ctx, "plain"); p.Status != backends.StatusReady {
		t.Errorf("a message of no batch was cancelled: %s", p.Status)
	}
	w = serve(h, "GET", "localhost", "/v1/batches/other", "")
	if b := decodeBody[Batch](t, w.Code, w.Body.Bytes()); b.Progress.Failed != 1 || !b.Suspended {
		t.Errorf("other after its cancel %+v", b)
	}
	if w := serve(h, "GET", "localhost", "/v1/batches/nosuch", ""); w.Code != http.StatusNotFound {
		t.Errorf("an unknown batch: %d", w.Code)
	}
	if w := serve(h, "POST", "localhost", "/v1/batches/nosuch/cancel?reason=typo", ""); w.Code != http.StatusNotFound {
		t.Errorf("a cancel of an unknown batch: %d %s", w.Code, w.Body)
	}
	if codes, _ := s.SuspendedBatches(ctx); len(codes) != 2 {
		t.Errorf("suspended %v: a cancel of an unknown batch suspended it", codes)
	}
}

func TestProgressOf(t *testing.T) {
	counts := map[backends.Status]int{
		backends.StatusAccepted: 1, backends.StatusReady: 2, backends.StatusProcessing: 3,
		backends.StatusSentAcknowledged: 4, backends.StatusCallingSent: 1, backends.StatusPECDeliveredAcknowledged: 1,
		backends.StatusFailed: 5, backends.StatusInvalidAcknowledged: 1, backends.StatusPECNotDelivered: 1,
		backends.StatusBouncedAcknowledged: 6, backends.StatusSuppressed: 7, backends.StatusCallingSuppressed: 1,
	}
	want := Progress{Waiting: 3, InFlight: 3, Sent: 6, Failed: 7, Bounced: 6, Suppressed: 8}
	if got := progressOf(counts, false); got != want {
		t.Errorf("progress %+v, want %+v", got, want)
	}
	if got := progressOf(counts, true); got.Held != 2 || got.Waiting != 1 {
		t.Errorf("suspended: %+v", got)
	}
}
