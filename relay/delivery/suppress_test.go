package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay/suppression"
)

// fields makes a recipient's unsubscribe fields that name it, for the
// streams named bulk.
type fields struct{ bulk string }

func (f fields) Bulk(stream string) bool { return stream == f.bulk }

func (fields) Fields(stream, rcpt, id string) []byte {
	return fmt.Appendf(nil, "List-Unsubscribe: <https://u.example/%s/%s/%s>\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n", stream, rcpt, id)
}

// TestDeliveryHoldsBack: the list is read again when a message is
// delivered: a recipient suppressed while it waited is not sent; one
// refused 550 5.1.1 goes on the list; a message all of whose recipients
// are held ends SUPPRESSED with its event.
func TestDeliveryHoldsBack(t *testing.T) {
	sp, store := outboxtest.Open(t)
	ctx := context.Background()
	now := time.Now().UTC()
	policy := suppression.New(suppression.Config{By: "relay test", HardBounce: suppression.Rule{Need: 1}}, store)
	add := func(id string, rcpts ...string) {
		outboxtest.Add(t, sp, store, &backends.Message{ID: id, Priority: 2,
			Envelope: backends.Envelope{Sender: "app@example.com", Recipients: rcpts}},
			[]byte("From: app@example.com\r\nSubject: hi\r\n\r\nhello\r\n"))
		for _, tr := range []backends.Transition{
			{ID: id, From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: now.Add(time.Minute)},
			{ID: id, From: backends.StatusIntaking, To: backends.StatusReady, Route: DefaultRoute},
		} {
			if err := store.Transition(ctx, tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	add("mixed", "held@example.net", "ok@example.net", "gone@example.net")
	add("all-held", "held@example.net")
	// Suppressed after the messages were made READY.
	if _, err := policy.Unsubscribe(ctx, suppression.Transactional, "held@example.net", suppression.Evidence{MessageID: "earlier"}, now); err != nil {
		t.Fatal(err)
	}
	upstream := smtptest.Start(t, smtptest.Options{})
	upstream.OnRcpt(func(to string) error {
		if strings.HasPrefix(to, "gone@") {
			return &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 1, 1}, Message: "No such user"}
		}
		return nil
	})
	e := testEngine(t, store, sp, Route{Name: DefaultRoute, Smarthost: upstream.Addr, TLS: TLSNone, MaxConnections: 1}, time.Minute, 10*time.Millisecond)
	e.cfg.Holds, e.cfg.Findings = policy, policy
	stop := runUntilStopped(e)
	defer stop()
	outboxtest.WaitCounts(t, store, time.Minute, func(n map[backends.Status]int) bool {
		return n[backends.StatusSentAcknowledged] == 1 && n[backends.StatusSuppressedAcknowledged] == 1
	})
	var to []string
	for _, m := range upstream.Messages() {
		to = append(to, m.To...)
	}
	if !slices.Equal(to, []string{"ok@example.net"}) {
		t.Errorf("upstream got mail for %v, want only ok@example.net", to)
	}
	m, _ := store.Get(ctx, "mixed")
	if m.Results[0].Status != "suppressed" || m.Results[1].Status != "sent" || m.Results[2].Status != "failed" {
		t.Errorf("results %+v", m.Results)
	}
	evs, _ := store.Events(ctx, "all-held")
	if len(evs) != 1 || evs[0].Outcome != string(backends.StatusSuppressed) {
		t.Fatalf("events of all-held: %+v", evs)
	}
	// Plugins are told the stream and the held recipients.
	var details struct {
		Stream     string              `json:"stream"`
		Recipients []outcome.Recipient `json:"recipients"`
	}
	if err := json.Unmarshal(evs[0].Details, &details); err != nil || details.Stream != suppression.Transactional ||
		len(details.Recipients) != 1 || details.Recipients[0].Status != outcome.RecipientSuppressed {
		t.Errorf("details of the SUPPRESSED event: %s (%v)", evs[0].Details, err)
	}
	// The hard verdict goes on the list once the outcome is recorded: wait
	// for it.
	var gone []backends.Suppression
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if gone, err = store.SuppressionsOf(ctx, "gone@example.net"); err != nil || len(gone) > 0 {
			break
		}
	}
	if err != nil || len(gone) != 1 || gone[0].Reason != backends.ReasonHardBounce || gone[0].MessageID != "mixed" || !strings.HasPrefix(gone[0].Code, "550 5.1.1") {
		t.Errorf("the 550 5.1.1 at RCPT: %+v %v", gone, err)
	}
}

// TestBulkFieldsPerRecipient: a message of a bulk stream leaves once per
// recipient, each copy with its own unsubscribe fields before the rest of
// the header; one whose app wrote List-Unsubscribe keeps the app's.
func TestBulkFieldsPerRecipient(t *testing.T) {
	sp, store := outboxtest.Open(t)
	ctx := context.Background()
	policy := suppression.New(suppression.Config{Streams: map[string]suppression.Stream{"news": {Bulk: true}}}, store)
	add := func(id, header string) {
		outboxtest.Add(t, sp, store, &backends.Message{ID: id, Priority: 2,
			Envelope: backends.Envelope{Sender: "news@example.com", Recipients: []string{"a@example.net", "b@example.net"},
				Control: map[string]string{suppression.HeaderStream: "news"}}},
			[]byte("From: news@example.com\r\n"+header+"Subject: hi\r\n\r\nhello\r\n"))
		for _, tr := range []backends.Transition{
			{ID: id, From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: time.Now().Add(time.Minute)},
			{ID: id, From: backends.StatusIntaking, To: backends.StatusReady, Route: DefaultRoute},
		} {
			if err := store.Transition(ctx, tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	add("ours", "")
	add("apps", "List-Unsubscribe: <https://app.example/u/1>\r\n")
	upstream := smtptest.Start(t, smtptest.Options{})
	e := testEngine(t, store, sp, Route{Name: DefaultRoute, Smarthost: upstream.Addr, TLS: TLSNone, MaxConnections: 1}, time.Minute, 10*time.Millisecond)
	e.cfg.Holds, e.cfg.Unsubscribes = policy, fields{bulk: "news"}
	stop := runUntilStopped(e)
	defer stop()
	outboxtest.WaitCounts(t, store, time.Minute, func(n map[backends.Status]int) bool {
		return n[backends.StatusSentAcknowledged] == 2
	})
	var ours, apps int
	for _, m := range upstream.Messages() {
		switch {
		case bytes.Contains(m.Data, []byte("app.example/u/1")):
			apps++
			if bytes.Contains(m.Data, []byte("u.example")) {
				t.Error("the app's List-Unsubscribe got ours too")
			}
		default:
			ours++
			if len(m.To) != 1 {
				t.Fatalf("a bulk copy went to %v: one recipient each", m.To)
			}
			want := fmt.Sprintf("List-Unsubscribe: <https://u.example/news/%s/ours>\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n", m.To[0])
			if !bytes.Contains(m.Data, []byte(want)) {
				t.Errorf("copy for %s:\n%s", m.To[0], m.Data)
			}
		}
	}
	if ours != 2 || apps != 1 {
		t.Errorf("%d copies with our fields (want 2, one per recipient), %d with the app's (want 1 for both)", ours, apps)
	}
}
