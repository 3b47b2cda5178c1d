package intake_test

import (
	"context"
	"strings"
	"testing"

	"github.com/genropy/postino/relay/intake"
)

// TestWhatAppsSend: 8-bit text without BODY=8BITMIME is taken as it is
// (Python's smtplib, msmtp and swaks send it so); a body line over 998
// octets is taken and its part re-encoded before the message is recorded,
// so that the spool holds no such line; header lines over 998 octets, and
// body lines over smtp.max_line_length, stay refused.
func TestWhatAppsSend(t *testing.T) {
	html := "<html>" + strings.Repeat("<p>Grüße</p>", 400) + "</html>"
	tests := []struct {
		name, data string
		want       string   // the reply's start
		spooled    []string // what the spool file holds
		eightBit   bool
	}{
		{name: "8-bit undeclared", data: "From: a@example.com\r\nSubject: x\r\n\r\nGrüße\r\n", want: "250",
			spooled: []string{"\r\n\r\nGrüße\r\n"}, eightBit: true},
		{name: "one-line html", data: "From: a@example.com\r\nMIME-Version: 1.0\r\nContent-Type: text/html; charset=utf-8\r\n\r\n" + html + "\r\n",
			want: "250", spooled: []string{"Content-Transfer-Encoding: quoted-printable\r\n", "<p>Gr=C3=BC=C3=9Fe</p>"}, eightBit: true},
		{name: "long header line", data: "From: a@example.com\r\nSubject: " + strings.Repeat("s", 990) + "\r\n\r\nx\r\n", want: "554 5.6.0"},
		{name: "line over max_line_length", data: "From: a@example.com\r\n\r\n" + strings.Repeat("b", 20001) + "\r\n", want: "554 5.6.0"},
		{name: "long line in a malformed part", data: "From: a@example.com\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nno colon\r\n\r\n" +
			strings.Repeat("b", 1200) + "\r\n--b--\r\n", want: "554 5.6.0"},
	}
	e := newEnv(t, func(c *intake.Config) { c.MaxLineLength = 20000 })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(e.spoolFiles(t))
			r := dialEHLO(t, e.addr)
			got := r.transaction("", tt.data+".\r\n")
			if !strings.HasPrefix(got, tt.want) {
				t.Fatalf("reply %q, want %s", got, tt.want)
			}
			if tt.want != "250" {
				if n := len(e.spoolFiles(t)); n != before {
					t.Errorf("%d spool files after a refusal, %d before", n, before)
				}
				return
			}
			m, err := e.store.Get(context.Background(), queuedID(t, got))
			if err != nil {
				t.Fatal(err)
			}
			if m.Envelope.EightBit != tt.eightBit || m.Envelope.SMTPUTF8 {
				t.Errorf("envelope %+v, want 8-bit %v and no SMTPUTF8", m.Envelope, tt.eightBit)
			}
			body := e.readSpool(t, m)
			for _, want := range tt.spooled {
				if !strings.Contains(body, want) {
					t.Errorf("the spool file lacks %q:\n%s", want, body)
				}
			}
			for i, line := range strings.Split(body, "\r\n") {
				if len(line) > 998 {
					t.Errorf("spooled line %d is %d octets long", i+1, len(line))
				}
			}
			if int64(len(body)) != m.Envelope.Size {
				t.Errorf("size %d recorded, the file has %d", m.Envelope.Size, len(body))
			}
			if n := len(e.spoolFiles(t)); n != before+1 {
				t.Errorf("%d spool files for one message", n-before)
			}
		})
	}
}
