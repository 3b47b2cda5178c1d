package bounce

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/internal/testrig/corpus"
)

// want is what a test expects of a recipient; empty fields are not
// checked.
type want struct {
	addr, action, status string
	code                 int
	verdict              string
	reason               Reason
}

func TestParse(t *testing.T) {
	verp := Options{BounceAddresses: []string{"bounces+{id}@example.com"}}
	tests := []struct {
		file     string
		opts     Options
		kind     Kind
		rcpts    []want
		keys     Keys
		feedback string
	}{
		{
			file:  "postfix.eml",
			kind:  KindBounce,
			rcpts: []want{{"alice@example.org", "failed", "5.1.1", 550, "hard", ReasonUserUnknown}},
			keys:  Keys{MailID: "pf-0001", MessageID: "msg-pf-0001@postino.example", EnvID: "env-pf-0001"},
		},
		{
			// Exim marks its bounces Auto-Submitted: auto-replied; they
			// are bounces all the same.
			file:  "exim.eml",
			kind:  KindBounce,
			rcpts: []want{{"bob@example.com", "failed", "5.2.2", 552, "soft", ReasonMailboxFull}},
			keys:  Keys{MailID: "ex-0002", MessageID: "msg-ex-0002@postino.example"},
		},
		{
			file:  "sendmail.eml",
			kind:  KindBounce,
			rcpts: []want{{"carol@example.net", "failed", "5.7.1", 550, "soft", ReasonBlocked}},
			keys:  Keys{MailID: "sm-0003", MessageID: "msg-sm-0003@postino.example"},
		},
		{
			file:  "qmail.eml",
			kind:  KindBounce,
			rcpts: []want{{"dave@nowhere.example", "failed", "5.1.2", 0, "hard", ReasonDomainNotFound}},
			keys:  Keys{MailID: "qm-0004", MessageID: "msg-qm-0004@postino.example"},
		},
		{
			// Microsoft writes 5.1.10 (RFC 7505's null MX) for unknown
			// recipients; the wording decides.
			file:  "office365.eml",
			kind:  KindBounce,
			rcpts: []want{{"erin@contoso.example", "failed", "5.1.10", 550, "hard", ReasonUserUnknown}},
			keys:  Keys{MailID: "ms-0005", MessageID: "msg-ms-0005@postino.example"},
		},
		{
			file:  "exchange-it.eml",
			kind:  KindBounce,
			rcpts: []want{{"mario.rossi@studio.example.it", "failed", "5.1.1", 550, "hard", ReasonUserUnknown}},
			keys:  Keys{MailID: "it-0006", MessageID: "msg-it-0006@postino.example"},
		},
		{
			file:  "gmail.eml",
			kind:  KindBounce,
			rcpts: []want{{"frank@example.com", "failed", "5.1.1", 550, "hard", ReasonUserUnknown}},
			keys:  Keys{MailID: "gm-0007", MessageID: "msg-gm-0007@postino.example"},
		},
		{
			file:  "yahoo.eml",
			kind:  KindBounce,
			rcpts: []want{{"grace@yahoo.example", "failed", "5.7.9", 554, "soft", ReasonPolicy}},
			keys:  Keys{MailID: "yh-0008", MessageID: "msg-yh-0008@postino.example"},
		},
		{
			// The remote server's own code wins over the generic Status.
			file:  "ses.eml",
			kind:  KindBounce,
			rcpts: []want{{"henry@example.net", "failed", "5.3.4", 554, "soft", ReasonTooLarge}},
			keys:  Keys{MailID: "ses-0009", MessageID: "msg-ses-0009@postino.example"},
		},
		{
			file:  "ses-notification.eml",
			kind:  KindBounce,
			rcpts: []want{{"ivy@example.org", "failed", "5.1.1", 550, "hard", ReasonUserUnknown}},
			keys:  Keys{MailID: "ses-0010", MessageID: "msg-ses-0010@postino.example"},
		},
		{
			file: "dsn-multi.eml",
			kind: KindBounce,
			rcpts: []want{
				{"jack@example.com", "failed", "5.1.1", 550, "hard", ReasonUserUnknown},
				{"kate@example.net", "failed", "5.2.2", 552, "soft", ReasonMailboxFull},
				{"liam@example.org", "delayed", "4.4.1", 421, "soft", ReasonNetwork},
			},
			keys: Keys{MailID: "dsn-0011", MessageID: "msg-dsn-0011@postino.example", EnvID: "env-0011"},
		},
		{
			file:  "delay.eml",
			kind:  KindDelay,
			rcpts: []want{{"mia@example.net", "delayed", "4.2.2", 452, "soft", ReasonMailboxFull}},
			keys:  Keys{MailID: "dl-0012", MessageID: "msg-dl-0012@postino.example"},
		},
		{
			// An auto-reply names the message it answers in In-Reply-To.
			file:  "autoreply.eml",
			kind:  KindAutoReply,
			rcpts: []want{{addr: "nora@example.it"}},
			keys:  Keys{MessageID: "msg-ar-0013@postino.example"},
		},
		{
			file:     "arf.eml",
			kind:     KindComplaint,
			rcpts:    []want{{addr: "olga@example.net"}},
			keys:     Keys{MailID: "arf-0014", MessageID: "msg-arf-0014@postino.example"},
			feedback: "abuse",
		},
		{
			file:  "verp.eml",
			opts:  verp,
			kind:  KindBounce,
			rcpts: []want{{"paul@example.org", "failed", "5.7.1", 550, "soft", ReasonBlocked}},
			keys:  Keys{VERP: "order-42"},
		},
		{
			// Postfix 3.7 when the queue lifetime runs out: failed, with
			// the last temporary reply and no word of expiry. The
			// upstream gave up; the message will not arrive, which says
			// nothing of the address.
			file:  "postfix-expired.eml",
			kind:  KindBounce,
			rcpts: []want{{"rita@example.org", "failed", "4.2.2", 452, "soft", ReasonExpired}},
			keys:  Keys{MailID: "pf-0017", MessageID: "msg-pf-0017@postino.example"},
		},
		{
			// Contact lines, help prose and list footers name no
			// recipient.
			file:  "contact.eml",
			kind:  KindBounce,
			rcpts: []want{{"sam@example.org", "failed", "5.1.1", 550, "hard", ReasonUserUnknown}},
			keys:  Keys{MailID: "ct-0018", MessageID: "msg-ct-0018@postino.example"},
		},
		{
			// Exchange's X.400 name: the SMTP address inside it.
			file:  "x400.eml",
			kind:  KindBounce,
			rcpts: []want{{"tom@example.org", "failed", "5.1.1", 550, "hard", ReasonUserUnknown}},
			keys:  Keys{MailID: "x4-0019", MessageID: "msg-x4-0019@postino.example"},
		},
		{
			// The local name an alias expanded into is no address the
			// app knows; the one it was expanded from is.
			file:  "expanded.eml",
			kind:  KindBounce,
			rcpts: []want{{addr: "ann@example.org", action: "failed", status: "5.2.0"}},
			keys:  Keys{MailID: "xp-0020", MessageID: "msg-xp-0020@postino.example"},
		},
		{
			// Exim names the file it could not write as the recipient;
			// the address it was generated by is the app's. The mailbox
			// stayed full until Exim gave up: expired, and soft.
			file:  "exim-spool.eml",
			kind:  KindBounce,
			rcpts: []want{{"bea@example.org", "failed", "5.0.0", 0, "soft", ReasonExpired}},
			keys:  Keys{MailID: "es-0021", MessageID: "msg-es-0021@postino.example"},
		},
		{
			// A report of deliveries only is not a bounce.
			file:  "success.eml",
			kind:  KindNotBounce,
			rcpts: []want{{addr: "quinn@example.com", action: "relayed", status: "2.0.0", code: 250}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			rep, err := Parse(f, tt.opts)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if rep.Kind != tt.kind {
				t.Errorf("Kind = %q, want %q", rep.Kind, tt.kind)
			}
			if rep.Keys != tt.keys {
				t.Errorf("Keys = %+v, want %+v", rep.Keys, tt.keys)
			}
			if rep.FeedbackType != tt.feedback {
				t.Errorf("FeedbackType = %q, want %q", rep.FeedbackType, tt.feedback)
			}
			checkRecipients(t, rep.Recipients, tt.rcpts)
		})
	}
}

// checkRecipients checks the recipients of a report against what a test
// expects of each, in order.
func checkRecipients(t *testing.T, rs []Recipient, ws []want) {
	t.Helper()
	if len(rs) != len(ws) {
		t.Fatalf("got %d recipients %+v, want %d", len(rs), rs, len(ws))
	}
	for i, w := range ws {
		r := rs[i]
		check := func(field, got, want string) {
			if want != "" && got != want {
				t.Errorf("recipient %d %s = %q, want %q", i, field, got, want)
			}
		}
		check("FinalRecipient", r.FinalRecipient, w.addr)
		check("Action", r.Action, w.action)
		check("Status", r.Status, w.status)
		check("Verdict", string(r.Verdict), w.verdict)
		check("Reason", string(r.Reason), string(w.reason))
		if w.code != 0 && r.SMTPCode != w.code {
			t.Errorf("recipient %d SMTPCode = %d, want %d", i, r.SMTPCode, w.code)
		}
	}
}

func TestParseReportFields(t *testing.T) {
	f, err := os.Open(filepath.Join("testdata", "postfix.eml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rep, err := Parse(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.MessageID != "20250304091503.4F1C21A2B3@mx.postino.example" {
		t.Errorf("MessageID = %q", rep.MessageID)
	}
	if rep.ReportingMTA != "mx.postino.example" {
		t.Errorf("ReportingMTA = %q", rep.ReportingMTA)
	}
	if want := time.Date(2025, 3, 4, 9, 15, 1, 0, time.UTC); !rep.ArrivalDate.Equal(want) {
		t.Errorf("ArrivalDate = %v, want %v", rep.ArrivalDate, want)
	}
	r := rep.Recipients[0]
	if r.RemoteMTA != "mx1.example.org" || !strings.Contains(r.Diagnostic, "User unknown in virtual mailbox table") {
		t.Errorf("RemoteMTA = %q, Diagnostic = %q", r.RemoteMTA, r.Diagnostic)
	}
}

func TestVERPMatcher(t *testing.T) {
	tests := []struct {
		template, addr, id string
	}{
		{"bounces+{id}@example.com", "bounces+order-42@example.com", "order-42"},
		{"bounces+{id}@example.com", "BOUNCES+Order.42@Example.COM", "Order.42"},
		{"bounces+{id}@example.com", "bounces+@example.com", ""},
		{"bounces+{id}@example.com", "bounces+a@example.com.evil", ""},
		{"bounces+{id}@example.com", "bounces+" + strings.Repeat("a", 37) + "@example.com", ""},
		{"b-{id}.x@example.com", "b-42.x@example.com", "42"},
		{"no-placeholder@example.com", "no-placeholder@example.com", ""},
	}
	for _, tt := range tests {
		h := "To: " + tt.addr + "\r\nFrom: MAILER-DAEMON@example.net\r\n\r\n"
		rep, err := Parse(strings.NewReader(h), Options{BounceAddresses: []string{tt.template}})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Keys.VERP != tt.id {
			t.Errorf("%s with %s: VERP = %q, want %q", tt.template, tt.addr, rep.Keys.VERP, tt.id)
		}
	}
}

// TestParseGarbage feeds input that is no bounce, or no message at all:
// it must neither panic nor take long.
func TestParseGarbage(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	random := make([]byte, 64<<10)
	rnd.Read(random)

	var nested strings.Builder
	const depth = 2000
	nested.WriteString("From: a@example.com\r\nSubject: nested\r\n")
	for i := 0; i < depth; i++ {
		fmt.Fprintf(&nested, "Content-Type: multipart/mixed; boundary=\"b%d\"\r\n\r\n--b%d\r\n", i, i)
	}
	nested.WriteString("Content-Type: text/plain\r\n\r\nhello\r\n")
	for i := depth - 1; i >= 0; i-- {
		fmt.Fprintf(&nested, "--b%d--\r\n", i)
	}

	big := "From: MAILER-DAEMON@example.com\r\nSubject: Undelivered Mail Returned to Sender\r\n\r\n" +
		strings.Repeat("<x@example.com>: 550 5.1.1 user unknown "+strings.Repeat("y", 60)+"\r\n", 10<<20/100)

	inputs := map[string][]byte{
		"empty":       nil,
		"random":      random,
		"header only": []byte("From: a@example.com\r\nSubject: hi\r\n"),
		"nested":      []byte(nested.String()),
		"10 MB body":  []byte(big),
		"bad boundary": []byte("From: a@example.com\r\nContent-Type: multipart/report; boundary=\"x\r\n\r\n" +
			"--x\r\nContent-Type: message/delivery-status\r\n\r\nFinal-Recipient: rfc822; a@b.example\r\n"),
		"binary header": append([]byte("From: a@example.com\r\nSubject: \x00\xff\xfe\r\n\r\n"), random[:512]...),
		"mbox line":     []byte("From MAILER-DAEMON Thu Jan  1 00:00:00 2025\nFrom: a@example.com\n\nbody\n"),
		"no blank line": []byte("From: a@example.com\r\nthis is not a header\r\nTo: b@example.com\r\n"),
	}
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			// No time bound: on a busy machine under -race a fixed one
			// fails good code; a parse that never ends meets the test's
			// timeout, and BenchmarkParseBig measures the parser's speed.
			rep, err := Parse(bytes.NewReader(in), Options{BounceAddresses: []string{"bounces+{id}@example.com"}})
			if err == nil && rep == nil {
				t.Error("nil report without error")
			}
		})
	}
}

func TestParseNotMessage(t *testing.T) {
	for _, in := range []string{"", "\r\n\r\nbody only", "no colon here\r\n\r\n"} {
		if _, err := Parse(strings.NewReader(in), Options{}); err == nil {
			t.Errorf("Parse(%q): no error", in)
		}
	}
}

func TestParseHeaderOnly(t *testing.T) {
	rep, err := Parse(strings.NewReader("From: a@example.com\r\nSubject: hello\r\n"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Kind != KindNotBounce || len(rep.Recipients) != 0 {
		t.Errorf("got %+v", rep)
	}
}

// FuzzParse checks that no input makes Parse panic.
func FuzzParse(f *testing.F) {
	corpus.AddFiles(f, filepath.Join("testdata", "*.eml"))
	f.Fuzz(func(t *testing.T, b []byte) {
		Parse(bytes.NewReader(b), Options{BounceAddresses: []string{"bounces+{id}@example.com"}})
	})
}

// TestParseLeadingBlankLines checks that blank lines before the header, or
// after an mbox From line, do not make a message "not a message".
func TestParseLeadingBlankLines(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "postfix.eml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"\n", "\n\n\n", "\r\n\r\n", " \t\n", "From MAILER-DAEMON Tue Mar  4 10:15:03 2025\n\n"} {
		t.Run(fmt.Sprintf("%q", prefix), func(t *testing.T) {
			rep, err := Parse(strings.NewReader(prefix+string(raw)), Options{})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if rep.Kind != KindBounce || len(rep.Recipients) != 1 || rep.Recipients[0].FinalRecipient != "alice@example.org" {
				t.Errorf("got %s %+v, want the bounce of alice@example.org", rep.Kind, rep.Recipients)
			}
		})
	}
}

// BenchmarkParseBig parses a 10 MB bounce whose body is one refusal line
// after another: the parser's cost grows with the input, not faster.
func BenchmarkParseBig(b *testing.B) {
	big := []byte("From: MAILER-DAEMON@example.com\r\nSubject: Undelivered Mail Returned to Sender\r\n\r\n" +
		strings.Repeat("<x@example.com>: 550 5.1.1 user unknown "+strings.Repeat("y", 60)+"\r\n", 10<<20/100))
	b.SetBytes(int64(len(big)))
	for b.Loop() {
		if _, err := Parse(bytes.NewReader(big), Options{}); err != nil {
			b.Fatal(err)
		}
	}
}
