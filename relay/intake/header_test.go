package intake

import (
	"bufio"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-message/textproto"
)

func readHeader(t *testing.T, s string) textproto.Header {
	t.Helper()
	h, err := textproto.ReadHeader(bufio.NewReader(strings.NewReader(s + "\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestReadControl(t *testing.T) {
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		header    string
		priority  int
		batch     string
		sendAfter time.Time
		wantErr   string
	}{
		{name: "none", header: "From: a@example.com\r\n", priority: 2},
		{name: "all", header: "X-Postino-Priority: 0\r\nX-Postino-Batch: spring-2026\r\nX-Postino-Send-After: 2026-11-22T10:00:00+01:00\r\n",
			priority: 0, batch: "spring-2026", sendAfter: time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC)},
		{name: "priority by name", header: "x-postino-priority: Low\r\n", priority: 3},
		{name: "unix seconds", header: "X-Postino-Send-After: 1795345200\r\n", priority: 2, sendAfter: time.Unix(1795345200, 0).UTC()},
		{name: "bad priority", header: "X-Postino-Priority: 7\r\n", wantErr: "is not a priority"},
		{name: "bad batch", header: "X-Postino-Batch: two words\r\n", wantErr: "batch code"},
		// A value that cannot be read says what can, and why it looks
		// wrong when it looks like milliseconds.
		{name: "bad time", header: "X-Postino-Send-After: tomorrow\r\n",
			wantErr: `"tomorrow" is not a time: give Unix seconds (1795345200) or an RFC 3339 time (2026-11-21T18:00:00+01:00)`},
		{name: "fraction of seconds", header: "X-Postino-Send-After: 1795345200.5\r\n", wantErr: `"1795345200.5" is not a time: give Unix seconds`},
		{name: "milliseconds", header: "X-Postino-Send-After: 1795345200000\r\n",
			wantErr: "is more than a year ahead (it looks like milliseconds: use seconds, the value divided by 1000): give Unix seconds (1795345200)"},
		{name: "milliseconds, decimal", header: "X-Postino-Send-After: 1795345200000.0\r\n",
			wantErr: `"1795345200000.0" is not a time (it looks like milliseconds: use seconds, the value divided by 1000): give Unix seconds`},
		{name: "milliseconds, with a unit", header: "X-Postino-Send-After: 1795345200000ms\r\n", wantErr: "it looks like milliseconds"},
		{name: "far ahead", header: "X-Postino-Send-After: 99999999999\r\n", wantErr: `"99999999999" is more than a year ahead: give Unix seconds`},
		{name: "twice", header: "X-Postino-Priority: 1\r\nX-Postino-Priority: 2\r\n", wantErr: "appears 2 times"},
		{name: "unknown", header: "X-Postino-Prority: 1\r\n", wantErr: "unknown control header X-Postino-Prority"},
		{name: "first unknown named", header: "X-Postino-Priority: 1\r\nX-Postino-Zed: 1\r\nX-Postino-Alpha: 1\r\n", wantErr: "unknown control header X-Postino-Zed"},
		// Only fields that start with "X-Postino-" are control headers.
		{name: "prefix only in part", header: "X-Postino: 1\r\nX-Postinos-Priority: 0\r\n", priority: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := readHeader(t, tt.header)
			c, err := readControl(&h, now)
			if tt.wantErr != "" {
				var se *Refusal
				if !errors.As(err, &se) || se.Code != 554 || !strings.Contains(se.Message, tt.wantErr) {
					t.Fatalf("error %v, want a 554 saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.priority != tt.priority || c.batch != tt.batch || !c.sendAfter.Equal(tt.sendAfter) {
				t.Errorf("got priority %d batch %q send-after %v", c.priority, c.batch, c.sendAfter)
			}
			for f := h.Fields(); f.Next(); {
				if strings.HasPrefix(strings.ToLower(f.Key()), "x-postino-") {
					t.Errorf("control header %s left in the message", f.Key())
				}
			}
		})
	}
}

// TestReadControlRaw checks that every control header is recorded as
// given, trimmed, and removed from the message, the PEC receipt's too,
// which checkPEC reads later.
func TestReadControlRaw(t *testing.T) {
	h := readHeader(t, "From: a@example.com\r\nx-postino-pec-receipt:  breve \r\nX-Postino-Batch: b1\r\nX-Postino-Priority: high\r\n")
	c, err := readControl(&h, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{HeaderPECReceipt: "breve", HeaderBatch: "b1", HeaderPriority: "high"}
	if !maps.Equal(c.raw, want) {
		t.Errorf("raw = %v, want %v", c.raw, want)
	}
	if c.priority != 1 || c.batch != "b1" {
		t.Errorf("got priority %d batch %q", c.priority, c.batch)
	}
	for f := h.Fields(); f.Next(); {
		if f.Key() != "From" {
			t.Errorf("field %s left in the message", f.Key())
		}
	}
}

func TestReadIdentity(t *testing.T) {
	tests := []struct {
		name      string
		header    string
		id, msgid string
		wantErr   string
	}{
		{name: "plain", header: "From: a@example.com\r\n"},
		{name: "app id and message id", header: "From: A <a@example.com>\r\nX-Genro-Mail-ID: order-42.v1\r\nMessage-ID: <abc@example.com>\r\n",
			id: "order-42.v1", msgid: "abc@example.com"},
		{name: "odd message id kept", header: "From: a@example.com\r\nMessage-ID: not really an id\r\n", msgid: "not really an id"},
		{name: "no from", header: "To: b@example.com\r\n", wantErr: "no From header"},
		{name: "two froms", header: "From: a@example.com\r\nFrom: b@example.com\r\n", wantErr: "appears 2 times"},
		{name: "bad from", header: "From: not an address\r\n", wantErr: "not a valid address"},
		{name: "from named in koi8-r", header: "From: =?koi8-r?b?8NLJ18XU?= <b@example.com>\r\n"},
		{name: "from named in latin-1", header: "From: =?iso-8859-1?q?Andr=E9?= <a@example.com>\r\n"},
		{name: "from in an unknown charset", header: "From: =?x-nonesuch?q?abc?= <a@example.com>\r\n", wantErr: "charset"},
		{name: "long id", header: "From: a@example.com\r\nX-Genro-Mail-ID: " + strings.Repeat("x", 37) + "\r\n", wantErr: "1 to 36"},
		{name: "bad id", header: "From: a@example.com\r\nX-Genro-Mail-ID: a/b\r\n", wantErr: "only letters"},
		{name: "two ids", header: "From: a@example.com\r\nX-Genro-Mail-ID: a\r\nX-Genro-Mail-ID: b\r\n", wantErr: "appears 2 times"},
		{name: "two message ids", header: "From: a@example.com\r\nMessage-ID: <a@x>\r\nMessage-ID: <b@x>\r\n", wantErr: "appears 2 times"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := readHeader(t, tt.header)
			got, err := readIdentity(&h)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.id != tt.id || got.messageID != tt.msgid {
				t.Errorf("got id %q message-id %q", got.id, got.messageID)
			}
		})
	}
}
