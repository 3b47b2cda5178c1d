package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	postinooutcome "github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay/admin"
)

// TestQueueShowBounced checks that queue show says why a recipient
// bounced instead of the 250 it was first accepted with.
func TestQueueShowBounced(t *testing.T) {
	details := func(final, original string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"bounce": postinooutcome.Bounce{Kind: "bounce", Type: "hard",
			Recipients: []postinooutcome.BounceRecipient{{FinalRecipient: final, OriginalRecipient: original, Status: "5.1.1"}}}})
		return b
	}
	m := admin.Message{ID: "b-1", Status: "BOUNCED-ACKNOWLEDGED", Reason: "gone@example.net: 550 5.1.1 User unknown (hard, user_unknown)",
		Recipients: []postinooutcome.Recipient{
			{Address: "gone@example.net", Status: "sent", Code: 250, EnhancedCode: "2.0.0", Text: "Ok"},
			{Address: "alias@example.org", Status: "sent", Code: 250, EnhancedCode: "2.0.0", Text: "Ok"},
			{Address: "fine@example.org", Status: "sent", Code: 250, EnhancedCode: "2.0.0", Text: "Ok"},
		},
		Events: []admin.Event{
			{ID: "e1", Outcome: "SENT", Reason: "delivered"},
			{ID: "e2", Outcome: "BOUNCED", Reason: "gone@example.net: 550 5.1.1 User unknown (hard, user_unknown)", Details: details("gone@example.net", "")},
			{ID: "e3", Outcome: "BOUNCED", Reason: "alias@example.org: 552 Mailbox full (hard, expired)", Details: details("a@mailhub.example.org", "alias@example.org")},
		}}
	var out bytes.Buffer
	printMessage(&out, m)
	for _, want := range []string{
		"gone@example.net   bounced  550 5.1.1 User unknown (hard, user_unknown)",
		"alias@example.org  bounced  552 Mailbox full (hard, expired)",
		"fine@example.org   sent     250 2.0.0 Ok",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("queue show lacks %q:\n%s", want, out.String())
		}
	}
}
