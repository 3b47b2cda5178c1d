package bounce

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay/mailbox"
	"github.com/genropy/postino/relay/suppression"
)

func TestRecipientReason(t *testing.T) {
	tests := []struct {
		name string
		rc   Recipient
		want string
	}{
		{"reply says its codes", Recipient{FinalRecipient: "a@example.org", SMTPCode: 550, Status: "5.1.1",
			Diagnostic: "550 5.1.1 <a@example.org>: User unknown", Verdict: outcome.VerdictHard, Reason: ReasonUserUnknown},
			"a@example.org: 550 5.1.1 <a@example.org>: User unknown (hard, user_unknown)"},
		{"reply inside prose", Recipient{FinalRecipient: "a@example.org", SMTPCode: 550, Status: "5.1.1",
			Diagnostic: "SMTP error from remote mail server after RCPT TO:<a@example.org>: 550 5.1.1 User unknown", Verdict: outcome.VerdictHard, Reason: ReasonUserUnknown},
			"a@example.org: SMTP error from remote mail server after RCPT TO:<a@example.org>: 550 5.1.1 User unknown (hard, user_unknown)"},
		{"status from the report", Recipient{FinalRecipient: "a@example.org", SMTPCode: 550, Status: "5.1.1",
			Diagnostic: "550 Requested action not taken", Verdict: outcome.VerdictHard, Reason: ReasonUserUnknown},
			"a@example.org: 5.1.1 550 Requested action not taken (hard, user_unknown)"},
		{"no reply", Recipient{FinalRecipient: "a@example.org", Status: "4.4.7", Verdict: outcome.VerdictSoft, Reason: ReasonExpired},
			"a@example.org: 4.4.7 (soft, expired)"},
		{"the app's address", Recipient{FinalRecipient: "a.fwd@mail.example.net", OriginalRecipient: "a@example.org", SMTPCode: 552,
			Diagnostic: "552 Mailbox full", Verdict: outcome.VerdictSoft, Reason: ReasonMailboxFull},
			"a@example.org: 552 Mailbox full (soft, mailbox_full)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := recipientReason(tt.rc, true); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// A bounce's event is one per message and final recipient: two reports on
// the same recipient, one naming its Original-Recipient and one not, are
// one event, and so is a report read again after reports began to give
// the app's address.
func TestBounceEventID(t *testing.T) {
	r := &Recorder{}
	m := &backends.Message{ID: "m1", Status: backends.StatusSent}
	id := func(rc Recipient, reportID string) string {
		rc.Action, rc.Verdict = "failed", outcome.VerdictHard
		es := r.events(m, &Report{Kind: KindBounce, MessageID: reportID, Recipients: []Recipient{rc}}, "test", nil)
		if len(es) != 1 {
			t.Fatalf("%d events, want 1", len(es))
		}
		return es[0].ID
	}
	plain := id(Recipient{FinalRecipient: "a.fwd@mail.example.net"}, "<r1@example.net>")
	withOriginal := id(Recipient{FinalRecipient: "a.fwd@mail.example.net", OriginalRecipient: "a@example.org"}, "<r2@example.net>")
	if plain != withOriginal {
		t.Errorf("two reports on one recipient made two events: %s and %s", plain, withOriginal)
	}
	if other := id(Recipient{FinalRecipient: "b@example.org"}, "<r1@example.net>"); other == plain {
		t.Error("two recipients made one event")
	}
}

// TestRecorderNotRecipient: a bounce that names an address the message was
// not sent to (a list member the list expanded to, with no
// Original-Recipient) is recorded, but marked so and with no verdict that
// could stop mail to it, and its event is soft; the message's own
// recipient keeps its hard verdict.
func TestRecorderNotRecipient(t *testing.T) {
	store := outboxtest.Store(t)
	ctx := context.Background()
	m := &backends.Message{ID: "nr-1", EmlPath: "outbox:nr-1.x",
		Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{"Alice@example.org", "team@lists.example.org"}}}
	if err := store.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	dsn, err := os.ReadFile(filepath.Join("testdata", "not-recipient.eml"))
	if err != nil {
		t.Fatal(err)
	}
	r := NewRecorder(store, RecorderConfig{Log: slog.New(slog.DiscardHandler)})
	if v, err := r.Handle(ctx, dsn); err != nil || v != mailbox.Processed {
		t.Fatalf("Handle = %v, %v", v, err)
	}
	events, err := store.Events(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]outcome.Bounce{}
	reasons := map[string]string{}
	for _, e := range events {
		var d struct {
			Bounce outcome.Bounce `json:"bounce"`
		}
		if err := json.Unmarshal(e.Details, &d); err != nil || e.Outcome != string(backends.StatusBounced) || len(d.Bounce.Recipients) != 1 {
			t.Fatalf("event %s %s: %s (%v)", e.Outcome, e.Reason, e.Details, err)
		}
		got[d.Bounce.Recipients[0].FinalRecipient] = d.Bounce
		reasons[d.Bounce.Recipients[0].FinalRecipient] = e.Reason
	}
	if len(got) != 2 {
		t.Fatalf("%d BOUNCED events, want 2: %v", len(got), reasons)
	}
	alice, bob := got["alice@example.org"], got["bob@member.example.net"]
	if rc := alice.Recipients[0]; alice.Type != "hard" || rc.Verdict != outcome.VerdictHard || rc.NotRecipient || rc.Reason != "user_unknown" {
		t.Errorf("the message's recipient: type %q, %+v", alice.Type, rc)
	}
	if rc := bob.Recipients[0]; bob.Type != "soft" || rc.Verdict != "" || !rc.NotRecipient || rc.Reason != "user_unknown" {
		t.Errorf("the address the message was not sent to: type %q, %+v", bob.Type, rc)
	}
	if want := "(not a recipient of the message, user_unknown)"; !strings.HasSuffix(reasons["bob@member.example.net"], want) {
		t.Errorf("its event's reason %q does not end with %q", reasons["bob@member.example.net"], want)
	}
}

// TestRecorderSuppresses: a hard verdict on a recipient of the message
// suppresses it for every stream, in the envelope's spelling; an address
// the message was not sent to adds nothing; a complaint suppresses its
// complainant for the message's stream; a report read again adds no
// strike.
func TestRecorderSuppresses(t *testing.T) {
	store := outboxtest.Store(t)
	ctx := context.Background()
	for _, m := range []*backends.Message{
		{ID: "nr-1", EmlPath: "outbox:nr-1.x", Envelope: backends.Envelope{Sender: "app@example.com",
			Recipients: []string{"Alice@example.org", "team@lists.example.org"}}},
		{ID: "arf-0014", MessageID: "msg-arf-0014@postino.example", EmlPath: "outbox:arf.x", Envelope: backends.Envelope{Sender: "news@postino.example",
			Recipients: []string{"olga@example.net"}, Control: map[string]string{suppression.HeaderStream: "news"}}},
	} {
		if err := store.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	policy := suppression.New(suppression.Config{Streams: map[string]suppression.Stream{"news": {}}, By: "relay test",
		HardBounce: suppression.Rule{Need: 2, Within: time.Hour}, Complaint: suppression.Rule{Need: 1}}, store)
	r := NewRecorder(store, RecorderConfig{Log: slog.New(slog.DiscardHandler), Findings: policy})
	for _, name := range []string{"not-recipient.eml", "not-recipient.eml", "arf.eml"} {
		raw, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if v, err := r.Handle(ctx, raw); err != nil || v != mailbox.Processed {
			t.Fatalf("Handle(%s) = %v, %v", name, v, err)
		}
	}
	alice, err := store.SuppressionsOf(ctx, "Alice@example.org")
	if err != nil || len(alice) != 1 || alice[0].Address != "Alice@example.org" || alice[0].Scope != backends.ScopeAll ||
		alice[0].Reason != backends.ReasonHardBounce || alice[0].MessageID != "nr-1" || alice[0].ReportID == "" {
		t.Fatalf("Alice: %+v %v", alice, err)
	}
	if alice[0].Strikes != 1 || alice[0].Active {
		t.Errorf("a report read twice counted twice: %+v", alice[0])
	}
	if bob, _ := store.SuppressionsOf(ctx, "bob@member.example.net"); len(bob) != 0 {
		t.Errorf("an address the message was not sent to was suppressed: %+v", bob)
	}
	olga, _ := store.SuppressionsOf(ctx, "olga@example.net")
	if len(olga) != 1 || olga[0].Scope != "news" || olga[0].Reason != backends.ReasonComplaint || !olga[0].Active {
		t.Errorf("the complaint: %+v", olga)
	}
}
