package postfixtest_test

import (
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/internal/testrig/dovecottest"
	"github.com/genropy/postino/internal/testrig/postfixtest"
)

// TestBounceToLMTP: Postfix takes mail for a user it does not have, and
// its DSN reaches the sender's mailbox through Dovecot's LMTP.
func TestBounceToLMTP(t *testing.T) {
	box := dovecottest.Start(t, dovecottest.Options{LMTP: true})
	pf := postfixtest.Start(t, postfixtest.Options{Local: "dest.test", LMTP: map[string]string{"example.test": box.LMTPAddr}})
	msg := "From: app@example.test\r\nTo: gone@dest.test\r\nSubject: hello\r\nMessage-ID: <first@example.test>\r\n\r\nhello\r\n"
	c, err := smtp.Dial(pf.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SendMail(box.User, []string{"gone@dest.test"}, strings.NewReader(msg)); err != nil {
		t.Fatalf("Postfix refused the message: %v", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		if msgs := box.Messages(t, "INBOX"); len(msgs) == 1 {
			raw := string(msgs[0].Raw)
			for _, want := range []string{"report-type=delivery-status", "Status: 5.1.1", "Final-Recipient: rfc822; gone@dest.test", "<first@example.test>"} {
				if !strings.Contains(raw, want) {
					t.Errorf("the DSN lacks %q:\n%s", want, raw)
				}
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no DSN in the mailbox:\n%s", pf.Log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := pf.Deliveries("gone@dest.test"); len(got) != 1 || !strings.Contains(got[0], "status=bounced") {
		t.Errorf("Postfix's deliveries to gone@dest.test: %q", got)
	}
}
