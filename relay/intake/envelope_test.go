package intake_test

import (
	"context"
	"strings"
	"testing"
	"unicode"

	"github.com/genropy/postino/backends"
)

// TestControlCharactersInEnvelope: an address or an EHLO name with a control
// character in it is refused, the reply does not echo it, and the session
// goes on for a clean transaction. Raw writes, as no client library sends
// such bytes.
func TestControlCharactersInEnvelope(t *testing.T) {
	tests := []struct {
		name    string
		command string
		want    string
	}{
		{"bare CR in the sender", "MAIL FROM:<a\rb@example.com>", "501 5.1.7"},
		{"NUL in the sender", "MAIL FROM:<a\x00b@example.com>", "501 5.1.7"},
		{"bare CR in a quoted local part", "MAIL FROM:<\"a\rb\"@example.com>", "501 5.1.7"},
		{"escaped CR in a quoted local part", "MAIL FROM:<\"a\\\rb\"@example.com>", "501 5.1.7"},
		{"DEL in the sender", "MAIL FROM:<ab\x7f@example.com>", "501 5.1.7"},
		{"escape in the sender's domain literal", "MAIL FROM:<a@[IPv6:fe80::1%\x1b]>", "501 5.1.7"},
		{"C1 control with SMTPUTF8", "MAIL FROM:<a\u0085b@example.com> SMTPUTF8", "501 5.1.7"},
		{"NUL in a recipient", "RCPT TO:<us\x00er@example.net>", "501 5.1.3"},
		{"bare CR in a recipient", "RCPT TO:<user@example.net\r>", "501 5.1.3"},
		{"tab in a quoted recipient", "RCPT TO:<\"us\ter\"@example.net>", "501 5.1.3"},
	}
	e := newEnv(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := dialEHLO(t, e.addr)
			if strings.HasPrefix(tt.command, "RCPT") {
				r.send("MAIL FROM:<app@example.com>\r\n")
				r.expect("250")
			}
			r.send(tt.command + "\r\n")
			got := r.expect(tt.want)
			if strings.ContainsFunc(got, unicode.IsControl) {
				t.Errorf("the reply %q echoes a control character", got)
			}
			// The session is still usable.
			r.send("RSET\r\n")
			r.expect("250")
			queuedID(t, r.transaction("", simple))
		})
	}
	t.Run("EHLO name", func(t *testing.T) {
		r := dialRaw(t, e.addr)
		r.send("EHLO app\rX-Injected: yes\r\n")
		r.expect("250")
		r.send("MAIL FROM:<app@example.com>\r\n")
		r.expect("501 5.5.4")
		r.send("EHLO app.local\r\n")
		r.expect("250")
		queuedID(t, r.transaction("", simple))
	})
	// Only the clean transactions were queued.
	page, _, err := e.store.List(context.Background(), backends.ListQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(page) != len(tests)+1 {
		t.Errorf("%d messages queued, want %d", len(page), len(tests)+1)
	}
	for _, m := range page {
		env := m.Envelope
		if strings.ContainsFunc(env.Sender+env.Helo+strings.Join(env.Recipients, ""), unicode.IsControl) {
			t.Errorf("queued with a control character: %+v", env)
		}
	}
}

// TestQuotedLocalPart: a quoted local part is taken; go-smtp stores it
// without its quotes, and delivery quotes it again (TestClientQuotesLocalParts
// in relay/delivery).
func TestQuotedLocalPart(t *testing.T) {
	e := newEnv(t, nil)
	r := dialEHLO(t, e.addr)
	r.send("MAIL FROM:<\"john doe\"@example.com>\r\n")
	r.expect("250")
	r.send("RCPT TO:<\"x> NOTIFY=NEVER\"@example.net>\r\n")
	r.expect("250")
	r.send("DATA\r\n")
	r.expect("354")
	r.send(simple)
	id := queuedID(t, r.reply())
	m, err := e.store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if m.Envelope.Sender != "john doe@example.com" || len(m.Envelope.Recipients) != 1 || m.Envelope.Recipients[0] != "x> NOTIFY=NEVER@example.net" {
		t.Errorf("envelope %q %q", m.Envelope.Sender, m.Envelope.Recipients)
	}
}
