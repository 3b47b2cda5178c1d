package intake

import (
	"bufio"
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-message/textproto"
	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/corpus"
)

// FuzzHeaders reads any header section as intake does, through the control
// headers (X-Postino-*) and then the identity ones (X-Genro-Mail-ID, From,
// Message-ID), and checks what each promises: no panic; once the control
// headers are read, none is left in the message and each value is one the
// relay can use; an identity read is a valid id and one sender; a refusal is
// a one-line 554 5.6.0 reply.
func FuzzHeaders(f *testing.F) {
	for _, seed := range []string{
		"From: a@example.com\r\n",
		"X-Postino-Priority: 0\r\nX-Postino-Batch: spring-2026\r\nX-Postino-Send-After: 2026-11-22T10:00:00+01:00\r\nFrom: a@example.com\r\n",
		"x-postino-priority: Low\r\nX-Postino-Send-After: 1795345200\r\nFrom: a@example.com\r\n",
		"X-Postino-PEC-Receipt: breve\r\nFrom: a@example.com\r\n",
		"X-Postino-Prority: 1\r\nX-Postino: 1\r\nX-Postinos-Priority: 0\r\n",
		"X-Postino-Priority: 1\r\nX-Postino-Priority: 2\r\n",
		"From: A <a@example.com>\r\nX-Genro-Mail-ID: order-42.v1\r\nMessage-ID: <abc@example.com>\r\n",
		"From: =?koi8-r?b?8NLJ18XU?= <b@example.com>\r\nMessage-ID: not really an id\r\n",
		"From: a@example.com\r\nX-Genro-Mail-ID:\r\n a/b\r\nMessage-ID:\r\n\t<folded@x>\r\n",
	} {
		f.Add([]byte(seed))
	}
	corpus.AddFiles(f, filepath.Join("testdata", "*.eml"))
	now := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := textproto.ReadHeader(bufio.NewReader(bytes.NewReader(b)))
		if err != nil {
			return // intake refuses it before the fields are read
		}
		ctrl, err := readControl(&h, now)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		checkControl(t, &h, ctrl, now)
		ident, err := readIdentity(&h)
		if err != nil {
			checkRefusal(t, err)
			return
		}
		if ident.id != "" && backends.CheckID(ident.id) != nil {
			t.Errorf("mail id %q accepted", ident.id)
		}
		if n := len(h.Values("From")); n != 1 {
			t.Errorf("accepted with %d From fields", n)
		}
		if h.Has("Message-Id") && ident.messageID == "" {
			t.Error("a Message-ID field read as none")
		}
	})
}

// checkControl checks what readControl accepted.
func checkControl(t *testing.T, h *textproto.Header, c control, now time.Time) {
	t.Helper()
	for f := h.Fields(); f.Next(); {
		if len(f.Key()) >= len(controlPrefix) && strings.EqualFold(f.Key()[:len(controlPrefix)], controlPrefix) {
			t.Errorf("control header %s left in the message", f.Key())
		}
	}
	if c.priority < backends.PriorityImmediate || c.priority > backends.PriorityLow {
		t.Errorf("priority %d", c.priority)
	}
	if c.batch != "" && backends.CheckBatch(c.batch) != nil {
		t.Errorf("batch %q accepted", c.batch)
	}
	if c.sendAfter.After(now.Add(maxSendAfterSkew)) {
		t.Errorf("send after %v accepted", c.sendAfter)
	}
	for name, v := range c.raw {
		if !slices.Contains(controlHeaders(), name) {
			t.Errorf("recorded %s, which is no control header", name)
		}
		if v != strings.TrimSpace(v) {
			t.Errorf("recorded %s %q untrimmed", name, v)
		}
	}
}

// checkRefusal checks that a refusal is a content error of one line.
func checkRefusal(t *testing.T, err error) {
	t.Helper()
	var se *Refusal
	if !errors.As(err, &se) || se.Code != 554 || se.EnhancedCode != (smtp.EnhancedCode{5, 6, 0}) {
		t.Fatalf("refused with %v, want a 554 5.6.0 reply", err)
	}
	if strings.ContainsAny(se.Message, "\r\n") {
		t.Errorf("reply %q spans lines", se.Message)
	}
}
