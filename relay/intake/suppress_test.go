package intake_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/relay/intake"
	"github.com/genropy/postino/relay/suppression"
)

// TestRefuseAtRcpt: a stream in refuse mode answers RCPT of a suppressed
// recipient 550 5.7.1 with the reason and the day, and nothing of the
// address or the evidence; other recipients, and a stream in record mode,
// are taken. A stream the relay does not configure is refused at DATA.
func TestRefuseAtRcpt(t *testing.T) {
	list, err := bolt.Open(filepath.Join(t.TempDir(), "list.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { list.Close() })
	policy := suppression.New(suppression.Config{
		Streams:      map[string]suppression.Stream{"alerts": {Mode: suppression.ModeRefuse}, "news": {Mode: suppression.ModeRecord}},
		RouteStreams: map[string]string{"default": "alerts", "news": "news"},
		Choose: func(m *backends.Message) (string, error) {
			if m.Envelope.Sender == "news@example.com" {
				return "news", nil
			}
			return "default", nil
		},
	}, list)
	c := backends.SuppressionChange{Entry: backends.Suppression{Address: "blocked@example.net", Reason: backends.ReasonHardBounce,
		Created: time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC), MessageID: "secret-evidence", Diagnostic: "550 5.1.1 user unknown"}, By: "test"}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	if _, err := list.Suppress(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *intake.Config) { c.Suppression = policy })

	r := dialEHLO(t, e.addr)
	r.send("MAIL FROM:<app@example.com>\r\n")
	r.expect("250")
	r.send("RCPT TO:<blocked@EXAMPLE.net>\r\n")
	got := r.expect("550 5.7.1")
	if !strings.Contains(got, "2026-11-02") || !strings.Contains(got, "hard_bounce") ||
		strings.Contains(got, "blocked") || strings.Contains(got, "secret") || strings.Contains(got, "user unknown") {
		t.Errorf("refusal %q: the reason and the day, nothing else", got)
	}
	r.send("RCPT TO:<fine@example.net>\r\n")
	r.expect("250")
	r.send("DATA\r\n")
	r.expect("354")
	r.send("From: app@example.com\r\nX-Postino-Stream: nosuch\r\nSubject: hi\r\n\r\nhello\r\n.\r\n")
	if got := r.expect("5"); !strings.Contains(got, "nosuch") {
		t.Errorf("unknown stream: %q", got)
	}
	r.send("RSET\r\n")
	r.expect("250")
	// The news route records: RCPT is taken; the worker holds it back.
	r.send("MAIL FROM:<news@example.com>\r\n")
	r.expect("250")
	r.send("RCPT TO:<blocked@example.net>\r\n")
	r.expect("250")
}
