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
// bounced instead of the 250 it was first accepted with, gives each
// recipient's verdict and the TLS of the session that carried it, and
// lists apart an address a bounce named that the message was not sent to.
func TestQueueShowBounced(t *testing.T) {
	details := func(rc postinooutcome.BounceRecipient) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"bounce": postinooutcome.Bounce{Kind: "bounce", Type: "hard",
			Recipients: []postinooutcome.BounceRecipient{rc}}})
		return b
	}
	hard, soft := postinooutcome.VerdictHard, postinooutcome.VerdictSoft
	m := admin.Message{ID: "b-1", Status: "BOUNCED-ACKNOWLEDGED", Reason: "gone@example.net: 550 5.1.1 User unknown (hard, user_unknown)",
		Recipients: []postinooutcome.Recipient{
			{Address: "gone@example.net", Status: "sent", Code: 250, EnhancedCode: "2.0.0", Text: "Ok"},
			{Address: "alias@example.org", Status: "sent", Code: 250, EnhancedCode: "2.0.0", Text: "Ok"},
			{Address: "fine@example.org", Status: "sent", Code: 250, EnhancedCode: "2.0.0", Text: "Ok", Host: "mx.example.org",
				TLS: &postinooutcome.TLS{Policy: "dane", Version: "TLS 1.3", Cipher: "TLS_AES_128_GCM_SHA256", Verified: postinooutcome.VerifiedDANEEE}},
			{Address: "nobody@example.org", Status: "failed", Verdict: hard, Code: 550, EnhancedCode: "5.1.1", Text: "no such user"},
			{Address: "full@example.org", Status: "pending", Verdict: soft, Code: 452, EnhancedCode: "4.2.2", Text: "mailbox full"},
		},
		Events: []admin.Event{
			{ID: "e1", Outcome: "SENT", Reason: "delivered"},
			{ID: "e2", Outcome: "BOUNCED", Reason: "gone@example.net: 550 5.1.1 User unknown (hard, user_unknown)",
				Details: details(postinooutcome.BounceRecipient{FinalRecipient: "gone@example.net", Status: "5.1.1", Verdict: hard})},
			{ID: "e3", Outcome: "BOUNCED", Reason: "alias@example.org: 552 Mailbox full (soft, expired)",
				Details: details(postinooutcome.BounceRecipient{FinalRecipient: "a@mailhub.example.org", OriginalRecipient: "alias@example.org", Verdict: soft})},
			{ID: "e4", Outcome: "BOUNCED", Reason: "bob@member.example.net: 550 5.1.1 User unknown (not a recipient of the message, user_unknown)",
				Details: details(postinooutcome.BounceRecipient{FinalRecipient: "bob@member.example.net", Status: "5.1.1", NotRecipient: true})},
		}}
	var out bytes.Buffer
	printMessage(&out, m)
	for _, want := range []string{
		"gone@example.net        bounced                   hard  550 5.1.1 User unknown (hard, user_unknown)",
		"alias@example.org       bounced                   soft  552 Mailbox full (soft, expired)",
		"fine@example.org        sent                            250 2.0.0 Ok (mx.example.org) [TLS 1.3 TLS_AES_128_GCM_SHA256, policy dane, verified dane-ee]",
		"nobody@example.org      failed                    hard  550 5.1.1 no such user",
		"full@example.org        pending                   soft  452 4.2.2 mailbox full",
		"bob@member.example.net  bounced, not a recipient        550 5.1.1 User unknown (not a recipient of the message, user_unknown)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("queue show lacks %q:\n%s", want, out.String())
		}
	}
}
