package pec_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/relay/mailbox"
	"github.com/genropy/postino/relay/pec"
	"github.com/genropy/postino/relay/pec/pectest"
)

// kept is the evidence the recorder saves, by message file and name.
type kept struct {
	mu    sync.Mutex
	files map[string][]byte
}

func (k *kept) SaveReceipt(_ context.Context, path, name string, raw []byte) error {
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
	store := outboxtest.Store(t)
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

// acceptedMessage stores a sent PEC message, records its acceptance
// receipt and moves it to PEC-ACCEPTED, as the dispatcher would.
func (s *recorderSetup) acceptedMessage(t *testing.T, id string, rcpts []string, acceptance pectest.ReceiptOptions) []byte {
	t.Helper()
	orig := s.message(t, id, rcpts...)
	ctx := context.Background()
	steps := []backends.Transition{
		{From: backends.StatusAccepted, To: backends.StatusIntaking}, {From: backends.StatusIntaking, To: backends.StatusReady},
		{From: backends.StatusReady, To: backends.StatusProcessing},
		// As delivery records SENT on a PEC account's route: with the alarm
		// of its receipts.
		{From: backends.StatusProcessing, To: backends.StatusSent, Event: backends.OutcomeEvent(backends.StatusProcessing, backends.StatusSent, "sent", nil),
			Alarm: &backends.Alarm{Kind: backends.AlarmPECReceipts, At: time.Now().Add(time.Hour)}},
		{From: backends.StatusSent, To: backends.StatusCallingSent}, {From: backends.StatusCallingSent, To: backends.StatusSentAcknowledged},
		{From: backends.StatusSentAcknowledged, To: backends.StatusPECAccepted},
	}
	for i, tr := range steps {
		tr.ID, tr.Reason = id, "test"
		if tr.To.Working() {
			tr.LeaseUntil = time.Now().Add(time.Hour)
		}
		if tr.To == backends.StatusPECAccepted {
			acceptance.Type, acceptance.Original = pec.Accettazione, orig
			s.handle(t, s.ca.Receipt(t, acceptance))
		}
		if err := s.store.Transition(ctx, tr); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	return orig
}

// TestDeliveryOverdue: who still owes a delivery receipt, as the
// recorder's own completion rule sees it.
func TestDeliveryOverdue(t *testing.T) {
	tests := []struct {
		name       string
		rcpts      []string
		acceptance pectest.ReceiptOptions
		delivered  []string // delivery receipts that came
		want       []string // recipients said to be late
	}{
		{name: "ordinary mailboxes owe nothing", rcpts: []string{"ordinary@example.com"},
			acceptance: pectest.ReceiptOptions{Recipients: []pec.Recipient{{Address: "ordinary@example.com", Type: "esterno"}}}},
		{name: "certified and ordinary", rcpts: []string{"anna@pec.dest.it", "ordinary@example.com"},
			acceptance: pectest.ReceiptOptions{Recipients: []pec.Recipient{{Address: "anna@pec.dest.it", Type: "certificato"}, {Address: "ordinary@example.com", Type: "esterno"}}},
			want:       []string{"anna@pec.dest.it"}},
		{name: "an acceptance without recipients, one delivered", rcpts: []string{"anna@pec.dest.it", "bruno@pec.dest.it"},
			acceptance: pectest.ReceiptOptions{DaticertEncoding: "none"}, delivered: []string{"anna@pec.dest.it"},
			want: []string{"bruno@pec.dest.it"}},
		{name: "all delivered", rcpts: []string{"anna@pec.dest.it", "bruno@pec.dest.it"},
			delivered: []string{"anna@pec.dest.it", "bruno@pec.dest.it"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newRecorder(t)
			id := fmt.Sprintf("overdue-%d", i)
			orig := s.acceptedMessage(t, id, tt.rcpts, tt.acceptance)
			for _, a := range tt.delivered {
				s.handle(t, s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, Original: orig, Consegna: a}))
			}
			limits := pec.Limits{Acceptance: time.Hour, Delivery: time.Hour}
			if err := s.rec.CheckOverdue(context.Background(), time.Now().Add(2*time.Hour), limits); err != nil {
				t.Fatal(err)
			}
			var late []string
			for _, e := range s.events(t, id) {
				if e.Outcome == pec.OutcomeDeliveryOverdue {
					late = append(late, e.PEC.Delivery)
				}
			}
			slices.Sort(late)
			if !slices.Equal(late, tt.want) {
				t.Errorf("late: %v, want %v", late, tt.want)
			}
		})
	}
}

// TestRecorderReadAgainAfterTrustFixed: a receipt first read with a trust
// bundle that lacks its signer (invalid), then again once the bundle is
// fixed, is recorded the second time, and both readings are kept apart.
func TestRecorderReadAgainAfterTrustFixed(t *testing.T) {
	s := newRecorder(t)
	orig := s.message(t, "order-6", "anna@pec.dest.it")
	receipt := s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.Accettazione, Original: orig})
	stale := pec.NewRecorder(s.store, s.kept, pec.Options{Roots: pectest.NewCA(t).Pool()},
		slog.New(slog.NewTextHandler(io.Discard, nil)), pec.NewMetrics(prometheus.NewRegistry()), nil)
	if _, err := stale.Handle(context.Background(), receipt); err != nil {
		t.Fatal(err)
	}
	s.handle(t, receipt)
	var outcomes []string
	for _, e := range s.events(t, "order-6") {
		outcomes = append(outcomes, e.Outcome)
	}
	if want := []string{pec.OutcomeInvalidSignature, pec.OutcomeAccepted}; !slices.Equal(outcomes, want) {
		t.Errorf("events %v, want %v", outcomes, want)
	}
	if len(s.kept.files) != 2 {
		t.Errorf("kept %d files, want the invalid and the valid reading apart", len(s.kept.files))
	}
}

// TestRecorderForgedReceiptLinksNothing: a receipt whose signature fails is
// recorded as such and does not tie its identificativo to the message, so
// that the receipts found by that identificativo later are not misfiled.
func TestRecorderForgedReceiptLinksNothing(t *testing.T) {
	s := newRecorder(t)
	orig := s.message(t, "order-5", "anna@pec.dest.it")
	const ident = "opec-test.forged@pec.provider.test"
	forger := pectest.NewCA(t)
	s.handle(t, forger.Receipt(t, pectest.ReceiptOptions{Type: pec.Accettazione, Original: orig, Identificativo: ident}))
	if got := s.events(t, "order-5"); len(got) != 1 || got[0].Outcome != pec.OutcomeInvalidSignature {
		t.Fatalf("events %+v", got)
	}
	// A genuine receipt that only the identificativo could match.
	other := strings.Replace(string(orig), "order-5@relay.test", "rewritten@provider.test", 1)
	other = strings.Replace(other, "X-Genro-Mail-ID: order-5\r\n", "", 1)
	if v := s.handle(t, s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.PresaInCarico, Original: []byte(other), Identificativo: ident})); v != mailbox.Unmatched {
		t.Errorf("a receipt found through a forged receipt's identificativo: verdict %v", v)
	}
}

// brokenEvents fails to read the events of one message, or to list one
// status.
type brokenEvents struct {
	*bolt.Store
	broken       string
	brokenAlarms bool
}

func (b brokenEvents) DueAlarms(ctx context.Context, kind string, now time.Time, limit int) ([]backends.Alarm, error) {
	if b.brokenAlarms {
		return nil, errors.New("index damaged")
	}
	return b.Store.DueAlarms(ctx, kind, now, limit)
}

func (b brokenEvents) Events(ctx context.Context, id string) ([]*backends.Event, error) {
	if id == b.broken {
		return nil, errors.New("row damaged")
	}
	return b.Store.Events(ctx, id)
}

// TestOverdueGoesPastWhatItCannotRead: a message whose events cannot be
// read is named in the error, and the others still get their events, with
// the callbacks woken for them; alarms that cannot be read are named too.
func TestOverdueGoesPastWhatItCannotRead(t *testing.T) {
	for _, tt := range []struct {
		name   string
		broken brokenEvents
		want   string
		others bool // late-2 gets its event
	}{
		{"message", brokenEvents{broken: "late-1"}, "late-1", true},
		{"alarms", brokenEvents{brokenAlarms: true}, "due receipt alarms", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newRecorder(t)
			var woken atomic.Int32
			tt.broken.Store = s.store
			rec := pec.NewRecorder(tt.broken, s.kept, pec.Options{Roots: s.ca.Pool()},
				slog.New(slog.NewTextHandler(io.Discard, nil)), pec.NewMetrics(prometheus.NewRegistry()), func() { woken.Add(1) })
			for _, id := range []string{"late-1", "late-2"} {
				s.acceptedMessage(t, id, []string{"anna@pec.dest.it"}, pectest.ReceiptOptions{})
			}
			limits := pec.Limits{Acceptance: time.Hour, Delivery: time.Hour}
			err := rec.CheckOverdue(context.Background(), time.Now().Add(2*time.Hour), limits)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming %s", err, tt.want)
			}
			if !tt.others {
				return
			}
			got := s.events(t, "late-2")
			if last := got[len(got)-1]; last.Outcome != pec.OutcomeDeliveryOverdue {
				t.Errorf("late-2: events %+v", got)
			}
			if woken.Load() == 0 {
				t.Error("the callbacks were not woken for the events raised")
			}
		})
	}
}

// TestRecorderWrapped: a receipt forwarded or sent on by a list is recorded
// from its own signature, and its event says what it came inside.
func TestRecorderWrapped(t *testing.T) {
	s := newRecorder(t)
	orig := s.message(t, "order-9", "anna@pec.dest.it")
	s.handle(t, forward(s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.Accettazione, Original: orig}), "", ""))
	s.handle(t, listCopy(t, s.ca.Receipt(t, pectest.ReceiptOptions{Type: pec.PresaInCarico, Original: orig})))
	es, err := s.store.Events(context.Background(), "order-9")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ outcome, how, reason string }{
		{pec.OutcomeAccepted, pec.Forwarded, "; forwarded inside a message from segreteria@ufficio.test"},
		{pec.OutcomeTakenInCharge, pec.Wrapped, "; wrapped in a message of the list Soci <soci.lista.test>"},
	}
	if len(es) != len(want) {
		t.Fatalf("events %+v", es)
	}
	for i, w := range want {
		var d struct {
			PEC       struct{ Signature string }
			WrappedIn pec.Wrapper `json:"wrapped_in"`
		}
		if err := json.Unmarshal(es[i].Details, &d); err != nil {
			t.Fatal(err)
		}
		if es[i].Outcome != w.outcome || d.PEC.Signature != "valid" || d.WrappedIn.How != w.how || !strings.Contains(es[i].Reason, w.reason) {
			t.Errorf("event %d: %s %q %+v, want %s wrapped %s with %q", i, es[i].Outcome, es[i].Reason, d, w.outcome, w.how, w.reason)
		}
	}
}
