package bounce

import (
	"testing"

	"github.com/genropy/postino/backends"
)

func TestRecipientReason(t *testing.T) {
	tests := []struct {
		name string
		rc   Recipient
		want string
	}{
		{"reply says its codes", Recipient{FinalRecipient: "a@example.org", SMTPCode: 550, Status: "5.1.1",
			Diagnostic: "550 5.1.1 <a@example.org>: User unknown", Type: "hard", Reason: ReasonUserUnknown},
			"a@example.org: 550 5.1.1 <a@example.org>: User unknown (hard, user_unknown)"},
		{"reply inside prose", Recipient{FinalRecipient: "a@example.org", SMTPCode: 550, Status: "5.1.1",
			Diagnostic: "SMTP error from remote mail server after RCPT TO:<a@example.org>: 550 5.1.1 User unknown", Type: "hard", Reason: ReasonUserUnknown},
			"a@example.org: SMTP error from remote mail server after RCPT TO:<a@example.org>: 550 5.1.1 User unknown (hard, user_unknown)"},
		{"status from the report", Recipient{FinalRecipient: "a@example.org", SMTPCode: 550, Status: "5.1.1",
			Diagnostic: "550 Requested action not taken", Type: "hard", Reason: ReasonUserUnknown},
			"a@example.org: 5.1.1 550 Requested action not taken (hard, user_unknown)"},
		{"no reply", Recipient{FinalRecipient: "a@example.org", Status: "4.4.7", Type: "hard", Reason: ReasonExpired},
			"a@example.org: 4.4.7 (hard, expired)"},
		{"the app's address", Recipient{FinalRecipient: "a.fwd@mail.example.net", OriginalRecipient: "a@example.org", SMTPCode: 552,
			Diagnostic: "552 Mailbox full", Type: "soft", Reason: ReasonMailboxFull},
			"a@example.org: 552 Mailbox full (soft, mailbox_full)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := recipientReason(tt.rc); got != tt.want {
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
		rc.Action, rc.Type = "failed", "hard"
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
