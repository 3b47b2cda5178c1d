package intake_test

import (
	"context"
	"strings"
	"testing"

	"github.com/genropy/postino/relay/intake"
)

func TestPECSender(t *testing.T) {
	e := newEnv(t, func(c *intake.Config) {
		c.PEC = map[string]intake.PECAccount{"ufficio@pec.example.it": {Address: "ufficio@pec.example.it", Receipt: "completa"}}
	})
	send := func(mailFrom, data string) string {
		r := dialEHLO(t, e.addr)
		r.send("MAIL FROM:<" + mailFrom + ">\r\n")
		r.expect("250")
		r.send("RCPT TO:<dest@pec.other.it>\r\n")
		r.expect("250")
		r.send("DATA\r\n")
		r.expect("354")
		r.send(data)
		return r.reply()
	}
	for _, tt := range []struct {
		name, from, header string
		reply, tipo        string
	}{
		{"the account's default receipt", "ufficio@pec.example.it", "From: Ufficio <ufficio@pec.example.it>\r\n", "250", "completa"},
		{"a receipt asked per message", "UFFICIO@pec.example.it", "From: ufficio@pec.example.it\r\nX-Postino-PEC-Receipt: Breve\r\n", "250", "breve"},
		{"the app's own X-TipoRicevuta is replaced", "ufficio@pec.example.it", "From: ufficio@pec.example.it\r\nX-TipoRicevuta: sintetica\r\nX-Postino-PEC-Receipt: completa\r\n", "250", "completa"},
		{"an unknown receipt", "ufficio@pec.example.it", "From: ufficio@pec.example.it\r\nX-Postino-PEC-Receipt: lunga\r\n", "554", ""},
		{"another From", "ufficio@pec.example.it", "From: boss@example.it\r\n", "550 5.7.1 PEC account ufficio@pec.example.it sends only with From: ufficio@pec.example.it", ""},
		{"two From addresses", "ufficio@pec.example.it", "From: ufficio@pec.example.it, boss@example.it\r\n", "550 5.7.1", ""},
		{"a PEC receipt asked for ordinary mail", "app@example.com", "From: app@example.com\r\nX-Postino-PEC-Receipt: breve\r\n", "554", ""},
		{"ordinary mail", "app@example.com", "From: app@example.com\r\n", "250", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			reply := send(tt.from, tt.header+"To: dest@pec.other.it\r\nSubject: atto\r\n\r\ntesto\r\n.\r\n")
			if !strings.HasPrefix(reply, tt.reply) {
				t.Fatalf("reply %q, want %q", reply, tt.reply)
			}
			if tt.reply != "250" {
				return
			}
			m, _ := e.store.Get(context.Background(), queuedID(t, reply))
			body := e.readSpool(t, m)
			got := ""
			for _, l := range strings.Split(body, "\r\n") {
				if v, ok := strings.CutPrefix(l, "X-TipoRicevuta: "); ok {
					if got != "" {
						t.Errorf("X-TipoRicevuta twice:\n%s", body)
					}
					got = v
				}
			}
			if got != tt.tipo {
				t.Errorf("X-TipoRicevuta %q, want %q:\n%s", got, tt.tipo, body)
			}
		})
	}

	// Receipts find their message by Message-ID: a PEC message may not
	// reuse another's.
	first := send("ufficio@pec.example.it", "From: ufficio@pec.example.it\r\nMessage-ID: <atto-1@example.it>\r\nSubject: a\r\n\r\nx\r\n.\r\n")
	if !strings.HasPrefix(first, "250") {
		t.Fatal(first)
	}
	again := send("ufficio@pec.example.it", "From: ufficio@pec.example.it\r\nMessage-ID: <atto-1@example.it>\r\nSubject: b\r\n\r\nx\r\n.\r\n")
	if !strings.HasPrefix(again, "554") || !strings.Contains(again, "already used by message "+queuedID(t, first)) {
		t.Errorf("reused Message-ID: %q", again)
	}
}
