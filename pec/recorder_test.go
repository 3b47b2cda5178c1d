package pec_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/pec"
	"github.com/genropy/postino/pec/pectest"
	"github.com/genropy/postino/relay/mailbox"
)

// kept is the evidence the recorder saves, by message file and name.
type kept struct {
	mu    sync.Mutex
	files map[string][]byte
}

func (k *kept) SaveReceipt(path, name string, raw []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.files[path+"/"+name] = raw
	return nil
}

type recorderSetup struct {
	store *bolt.Store
	ca    *pectest.CA
	rec   *pec.Recorder
	kept  *kept
}

func newRecorder(t *testing.T) *recorderSetup {
	t.Helper()
	store, err := bolt.Open(filepath.Join(t.TempDir(), "outbox.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	ca := pectest.NewCA(t)
	k := &kept{files: map[string][]byte{}}
	rec := pec.NewRecorder(store, k, pec.Options{Roots: ca.Pool()}, slog.New(slog.NewTextHandler(io.Discard, nil)),
		pec.NewMetrics(prometheus.NewRegistry()), nil)
	return &recorderSetup{store: store, ca: ca, rec: rec, kept: k}
}

// message stores a sent PEC message and returns it as the provider got it.
func (s *recorderSetup) message(t *testing.T, id string, rcpts ...string) []byte {
	t.Helper()
	now := time.Now().UTC()
	m := &backends.Message{ID: id, MessageID: id + "@relay.test", Priority: backends.PriorityNormal, Reason: "accepted",
		EmlPath: id + ".eml", CreatedAt: now, Route: "pec:ufficio@pec.example.it",
		Envelope: backends.Envelope{Sender: "ufficio@pec.example.it", Recipients: rcpts, ReceivedAt: now}}
	if err := s.store.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return []byte("From: ufficio@pec.example.it\r\nTo: " + strings.Join(rcpts, ", ") + "\r\nSubject: Contratto\r\n" +
		"Message-ID: <" + m.MessageID + ">\r\nX-Genro-Mail-ID: " + id + "\r\n\r\nTesto.\r\n")
}

func (s *recorderSetup) handle(t *testing.T, raw []byte) mailbox.Verdict {
	t.Helper()
	v, err := s.rec.Handle(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

type recorded struct {
	Outcome   string
	MatchedBy string `json:"matched_by"`
	Receipt   string `json:"receipt"`
	PEC       struct {
		Source    string `json:"source"`
		Signature string `json:"signature"`
		Delivery  string `json:"delivery"`
	} `json:"pec"`
}

func (s *recorderSetup) events(t *testing.T, id string) []recorded {
	t.Helper()
	es, err := s.store.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var out []recorded
	for _, e := range es {
		var r recorded
		json.Unmarshal(e.Details, &r)
		r.Outcome = e.Outcome
		out = append(out, r)
	}
	return out
}

// TestRecorderCorrelation: the three keys, in their order, and what
// matches none.
func TestRecorderCorrelation(t *testing.T) {
	s := newRecorder(t)
	orig := s.message(t, "order-1", "anna@pec.dest.it")
	const ident = "opec-test.123@pec.provider.test"
	if v := s.handle(t, s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.Accettazione, Original: orig, Identificativo: ident})); v != mailbox.Processed {
		t.Fatalf("acceptance: verdict %v", v)
	}
	// A provider that rewrote the Message-ID: found by its identificativo,
	// recorded from the acceptance.
	other := strings.Replace(string(orig), "order-1@relay.test", "rewritten@provider.test", 1)
	other = strings.Replace(other, "X-Genro-Mail-ID: order-1\r\n", "", 1)
	s.handle(t, s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.PresaInCarico, Original: []byte(other), Identificativo: ident}))
	// Neither key known: the X-Genro-Mail-ID of the attached original.
	byMailID := strings.Replace(string(orig), "order-1@relay.test", "unknown@provider.test", 1)
	s.handle(t, s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, Original: []byte(byMailID), Identificativo: "opec-test.999@pec.provider.test"}))
	got := s.events(t, "order-1")
	want := []struct{ outcome, by string }{{pec.OutcomeAccepted, "Message-ID"}, {pec.OutcomeTakenInCharge, "identificativo"}, {pec.OutcomeDelivered, "X-Genro-Mail-ID"}}
	if len(got) != len(want) {
		t.Fatalf("events %+v", got)
	}
	for i, w := range want {
		if got[i].Outcome != w.outcome || got[i].MatchedBy != w.by || got[i].PEC.Signature != "valid" {
			t.Errorf("event %d: %+v, want %s by %s", i, got[i], w.outcome, w.by)
		}
		if s.kept.files["order-1.eml/"+got[i].Receipt] == nil {
			t.Errorf("receipt %s not kept", got[i].Receipt)
		}
	}
	// About no message of this outbox: set aside.
	stranger := s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.Accettazione})
	if v := s.handle(t, stranger); v != mailbox.Unmatched {
		t.Errorf("a receipt of another sender: verdict %v", v)
	}
	// Certified mail to the account is not a receipt.
	if v := s.handle(t, s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.PostaCertificata, Original: orig})); v != mailbox.Unmatched {
		t.Errorf("posta-certificata: verdict %v", v)
	}
	if v := s.handle(t, []byte("not mail at all")); v != mailbox.Unmatched {
		t.Errorf("garbage: verdict %v", v)
	}
}

// TestRecorderOnce: a receipt read twice (a crash before the move, a
// renumbered folder) is one event.
func TestRecorderOnce(t *testing.T) {
	s := newRecorder(t)
	orig := s.message(t, "order-2", "anna@pec.dest.it", "bruno@pec.dest.it")
	r := s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, Original: orig, Consegna: "anna@pec.dest.it"})
	s.handle(t, r)
	s.handle(t, r)
	got := s.events(t, "order-2")
	if len(got) != 1 || got[0].Outcome != pec.OutcomeRecipientDelivered || got[0].PEC.Delivery != "anna@pec.dest.it" {
		t.Fatalf("events %+v", got)
	}
	// The other recipient's completes the message.
	s.handle(t, s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, Original: orig, Consegna: "bruno@pec.dest.it"}))
	if got := s.events(t, "order-2"); len(got) != 2 || got[1].Outcome != pec.OutcomeDelivered {
		t.Fatalf("events %+v", got)
	}
}

// TestRecorderWithoutDaticert: the headers alone still make the event, which
// says so.
func TestRecorderWithoutDaticert(t *testing.T) {
	s := newRecorder(t)
	orig := s.message(t, "order-3", "anna@pec.dest.it")
	for _, enc := range []string{"none", "broken"} {
		s.handle(t, s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.Accettazione, Original: orig, DaticertEncoding: enc,
			Date: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(time.Duration(len(enc)) * time.Second)}))
	}
	got := s.events(t, "order-3")
	if len(got) != 2 {
		t.Fatalf("events %+v", got)
	}
	for _, e := range got {
		if e.Outcome != pec.OutcomeAccepted || e.PEC.Source != "headers" {
			t.Errorf("event %+v", e)
		}
	}
}

// TestRecorderLater: a receipt that comes before the relay recorded SENT
// is left for a later read.
func TestRecorderLater(t *testing.T) {
	s := newRecorder(t)
	orig := s.message(t, "order-4", "anna@pec.dest.it")
	ctx := context.Background()
	for _, step := range []struct{ from, to backends.Status }{{backends.StatusAccepted, backends.StatusIntaking},
		{backends.StatusIntaking, backends.StatusReady}, {backends.StatusReady, backends.StatusProcessing}} {
		if err := s.store.Transition(ctx, backends.Transition{ID: "order-4", From: step.from, To: step.to, Reason: "test",
			LeaseUntil: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if v := s.handle(t, s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.Accettazione, Original: orig})); v != mailbox.Later {
		t.Errorf("verdict %v", v)
	}
	if got := s.events(t, "order-4"); len(got) != 0 {
		t.Errorf("events %+v", got)
	}
}
