package intake_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/textproto"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/testrig/logtest"
	"github.com/genropy/postino/internal/testrig/testcert"
	"github.com/genropy/postino/relay/intake"
	"github.com/genropy/postino/spool"
)

type env struct {
	addr  string
	store *bolt.Store
	spool *spool.Spool
	cert  testcert.Pair
	logs  *logtest.Buffer
	reg   *prometheus.Registry
}

func newEnv(t *testing.T, mutate func(*intake.Config)) *env {
	t.Helper()
	dir := t.TempDir()
	sp, err := spool.Open(filepath.Join(dir, "spool"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := bolt.Open(filepath.Join(dir, "outbox.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{store: store, spool: sp, cert: testcert.New(t), reg: prometheus.NewRegistry()}
	cfg := intake.Config{
		Hostname:       "relay.test",
		MaxMessageSize: 64 << 10,
		MaxRecipients:  5,
		MaxLineLength:  998,
		AllowNetworks:  []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		ReadTimeout:    10 * time.Second,
		WriteTimeout:   10 * time.Second,
		CommitTimeout:  10 * time.Second,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	if cfg.TLS != nil {
		cfg.TLS = e.cert.ServerConfig()
	}
	log, logs := logtest.Logger()
	e.logs = logs
	srv := intake.NewServer(cfg, store, sp, log, intake.NewMetrics(e.reg), nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = l.Addr().String()
	go srv.Serve(l)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		sp.Close()
		store.Close()
	})
	return e
}

// raw is a hand-driven SMTP conversation, for what a well-behaved client
// library would refuse to send.
type raw struct {
	t *testing.T
	c net.Conn
	r *textproto.Reader
}

func dialRaw(t *testing.T, addr string) *raw {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := &raw{t: t, c: c, r: textproto.NewReader(bufio.NewReader(c))}
	r.expect("220")
	return r
}

// dialEHLO opens a raw session and greets.
func dialEHLO(t *testing.T, addr string) *raw {
	t.Helper()
	r := dialRaw(t, addr)
	r.send("EHLO app.local\r\n")
	r.expect("250")
	return r
}

func (r *raw) send(s string) {
	r.t.Helper()
	if _, err := io.WriteString(r.c, s); err != nil {
		r.t.Fatal(err)
	}
}

// reply reads one (possibly multi-line) reply.
func (r *raw) reply() string {
	r.t.Helper()
	var lines []string
	for {
		l, err := r.r.ReadLine()
		if err != nil {
			r.t.Fatalf("reading reply: %v (so far %q)", err, lines)
		}
		lines = append(lines, l)
		if len(l) < 4 || l[3] != '-' {
			return strings.Join(lines, "\n")
		}
	}
}

func (r *raw) expect(prefix string) string {
	r.t.Helper()
	got := r.reply()
	if !strings.HasPrefix(got, prefix) {
		r.t.Fatalf("reply %q, want %q", got, prefix)
	}
	return got
}

var queuedRE = regexp.MustCompile(`^250 2\.0\.0 Ok: queued as (\S+)$`)

func queuedID(t *testing.T, reply string) string {
	t.Helper()
	m := queuedRE.FindStringSubmatch(reply)
	if m == nil {
		t.Fatalf("reply %q is not a queued answer", reply)
	}
	return m[1]
}

// transaction sends one message in a raw session and returns the reply to
// its data.
func (r *raw) transaction(mailArgs, data string) string {
	r.t.Helper()
	r.send("MAIL FROM:<app@example.com>" + mailArgs + "\r\n")
	r.expect("250")
	r.send("RCPT TO:<user@example.net>\r\n")
	r.expect("250")
	r.send("DATA\r\n")
	r.expect("354")
	r.send(data)
	return r.reply()
}

func (e *env) spoolFiles(t *testing.T) []spool.Entry {
	t.Helper()
	var out []spool.Entry
	if err := e.spool.Walk(func(en spool.Entry) error { out = append(out, en); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *env) readSpool(t *testing.T, m *backends.Message) string {
	t.Helper()
	f, err := e.spool.Open(m.EmlPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, _ := io.ReadAll(f)
	return string(b)
}

func (e *env) count(t *testing.T) int {
	t.Helper()
	n, err := e.store.Counts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, v := range n {
		total += v
	}
	return total
}

const simple = "From: App <app@example.com>\r\nTo: user@example.net\r\nSubject: hello\r\n\r\nHello.\r\n.\r\n"

func TestAcceptDurably(t *testing.T) {
	e := newEnv(t, nil)
	r := dialEHLO(t, e.addr)
	id := queuedID(t, r.transaction(" BODY=8BITMIME", simple))

	m, err := e.store.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("the row of an acknowledged message: %v", err)
	}
	if m.Status != backends.StatusAccepted && m.Status != backends.StatusReady {
		t.Errorf("status %s", m.Status)
	}
	env := m.Envelope
	if env.Sender != "app@example.com" || fmt.Sprint(env.Recipients) != "[user@example.net]" ||
		env.Helo != "app.local" || !strings.HasPrefix(env.ClientAddr, "127.0.0.1:") || env.ReceivedAt.IsZero() {
		t.Errorf("envelope %+v", env)
	}
	body := e.readSpool(t, m)
	for _, want := range []string{"Received: from app.local ([127.0.0.1])", "X-Genro-Mail-ID: " + id + "\r\n",
		"Message-ID: <" + m.MessageID + ">\r\n", "\r\nDate: ", "\r\n\r\nHello.\r\n"} {
		if !strings.Contains(body, want) {
			t.Errorf("spool file lacks %q:\n%s", want, body)
		}
	}
	if !strings.HasPrefix(body, "Received: ") {
		t.Errorf("the Received field is not first:\n%s", body)
	}
	if int64(len(body)) != env.Size {
		t.Errorf("size %d, file %d", env.Size, len(body))
	}
	h, _ := e.store.History(context.Background(), id)
	if len(h) == 0 || h[0].Status != backends.StatusAccepted {
		t.Errorf("history %+v", h)
	}
}

// TestSlowUpload: a client slower than the commit timeout to send its
// message still gets it accepted; the timeout bounds the outbox, not the
// client.
func TestSlowUpload(t *testing.T) {
	const commit = 200 * time.Millisecond
	e := newEnv(t, func(c *intake.Config) { c.CommitTimeout = commit })
	r := dialEHLO(t, e.addr)
	r.send("MAIL FROM:<app@example.com>\r\n")
	r.expect("250")
	r.send("RCPT TO:<user@example.net>\r\n")
	r.expect("250")
	r.send("DATA\r\n")
	r.expect("354")
	line := strings.Repeat("x", 76) + "\r\n"
	r.send("From: <app@example.com>\r\nTo: <user@example.net>\r\nSubject: slow\r\n\r\n" + strings.Repeat(line, 400))
	time.Sleep(3 * commit) // the client dawdles: the delay is the test's input, not a wait
	r.send(strings.Repeat(line, 10) + ".\r\n")
	id := queuedID(t, r.reply())
	if _, err := e.store.Get(context.Background(), id); err != nil {
		t.Errorf("the row of a slowly sent message: %v", err)
	}
}

func TestCapabilities(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*intake.Config)
		want   []string
		absent []string
	}{
		{name: "plain", want: []string{"PIPELINING", "8BITMIME", "SMTPUTF8", "ENHANCEDSTATUSCODES", "CHUNKING", "SIZE 65536"},
			absent: []string{"STARTTLS", "AUTH"}},
		{name: "tls", mutate: func(c *intake.Config) { c.TLS = &tls.Config{} }, want: []string{"STARTTLS"}},
		{name: "auth needs tls", mutate: func(c *intake.Config) { c.Accounts = intake.Accounts{"app": "pw"} }, absent: []string{"AUTH"}},
		{name: "auth without tls when allowed", mutate: func(c *intake.Config) {
			c.Accounts = intake.Accounts{"app": "pw"}
			c.AllowInsecureAuth = true
		}, want: []string{"AUTH PLAIN LOGIN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.mutate)
			r := dialRaw(t, e.addr)
			r.send("EHLO app.local\r\n")
			caps := r.expect("250")
			for _, w := range tt.want {
				if !strings.Contains(caps, "250-"+w) && !strings.Contains(caps, "250 "+w) {
					t.Errorf("EHLO reply lacks %s:\n%s", w, caps)
				}
			}
			for _, a := range tt.absent {
				if strings.Contains(caps, a) {
					t.Errorf("EHLO reply offers %s:\n%s", a, caps)
				}
			}
		})
	}
}

func TestRejections(t *testing.T) {
	big := strings.Repeat("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd\r\n", 1200)
	tests := []struct {
		name     string
		mailArgs string
		data     string
		want     string
	}{
		{"size", "", "From: a@example.com\r\n\r\n" + big + ".\r\n", "552 5.3.4"},
		{"no from", "", "To: b@example.net\r\n\r\nx\r\n.\r\n", "554 5.6.0"},
		{"nul", "", "From: a@example.com\r\n\r\nx\x00y\r\n.\r\n", "554 5.6.0"},
		{"long header line", "", "From: a@example.com\r\nSubject: " + strings.Repeat("s", 990) + "\r\n\r\nx\r\n.\r\n", "554 5.6.0"},
		{"long body line", "", "From: a@example.com\r\n\r\n" + strings.Repeat("b", 1200) + "\r\n.\r\n", "554 5.6.0"},
		{"bad priority", "", "From: a@example.com\r\nX-Postino-Priority: urgent\r\n\r\nx\r\n.\r\n", "554 5.6.0"},
		{"bad batch", "", "From: a@example.com\r\nX-Postino-Batch: a b\r\n\r\nx\r\n.\r\n", "554 5.6.0"},
		{"bad send-after", "", "From: a@example.com\r\nX-Postino-Send-After: soon\r\n\r\nx\r\n.\r\n", "554 5.6.0"},
		{"unknown control header", "", "From: a@example.com\r\nX-Postino-Foo: 1\r\n\r\nx\r\n.\r\n", "554 5.6.0"},
		{"bad mail id", "", "From: a@example.com\r\nX-Genro-Mail-ID: has space\r\n\r\nx\r\n.\r\n", "554 5.6.0"},
		{"malformed header", "", "From: a@example.com\r\nthis is not a header\r\n\r\nx\r\n.\r\n", "554 5.6.0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			r := dialEHLO(t, e.addr)
			if got := r.transaction(tt.mailArgs, tt.data); !strings.HasPrefix(got, tt.want) {
				t.Fatalf("reply %q, want %s", got, tt.want)
			}
			if n := e.count(t); n != 0 {
				t.Errorf("%d rows after a refusal", n)
			}
			if f := e.spoolFiles(t); len(f) != 0 {
				t.Errorf("spool files after a refusal: %v", f)
			}
			// The session goes on.
			queuedID(t, r.transaction(" BODY=8BITMIME", simple))
		})
	}
}

func TestCommandErrors(t *testing.T) {
	tests := []struct {
		name string
		cmds []string // all but the last must succeed
		want string
	}{
		{"mail without colon", []string{"MAIL FROM <app@example.com>"}, "501 5.5.2"},
		{"mail unknown parameter", []string{"MAIL FROM:<a@example.com> FOO=1"}, "500 5.5.4"},
		{"mail size over the limit", []string{"MAIL FROM:<a@example.com> SIZE=999999999"}, "552 5.3.4"},
		{"sender without domain", []string{"MAIL FROM:<app>"}, "501 5.5.2"},
		{"sender bad domain", []string{"MAIL FROM:<app@exa_mple.com>"}, "501 5.1.7"},
		{"recipient without domain", []string{"MAIL FROM:<a@example.com>", "RCPT TO:<user>"}, "501 5.5.2"},
		{"recipient bad label", []string{"MAIL FROM:<a@example.com>", "RCPT TO:<user@-bad.example>"}, "501 5.1.3"},
		{"recipient bad domain", []string{"MAIL FROM:<a@example.com>", "RCPT TO:<user@exa mple.com>"}, "501"},
		{"utf8 without smtputf8", []string{"MAIL FROM:<a@example.com>", "RCPT TO:<josé@example.com>"}, "553 5.6.7"},
		{"rcpt before mail", []string{"RCPT TO:<user@example.net>"}, "502 5.5.1"},
		{"data before rcpt", []string{"MAIL FROM:<a@example.com>", "DATA"}, "502 5.5.1"},
		{"unknown command", []string{"FROB"}, "500 5.5.2"},
		{"too many recipients", []string{"MAIL FROM:<a@example.com>", "RCPT TO:<a@example.net>", "RCPT TO:<b@example.net>",
			"RCPT TO:<c@example.net>", "RCPT TO:<d@example.net>", "RCPT TO:<e@example.net>", "RCPT TO:<f@example.net>"}, "452 4.5.3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			r := dialEHLO(t, e.addr)
			for i, c := range tt.cmds {
				r.send(c + "\r\n")
				if i < len(tt.cmds)-1 {
					r.expect("250")
					continue
				}
				if got := r.reply(); !strings.HasPrefix(got, tt.want) {
					t.Fatalf("%s: reply %q, want %s", c, got, tt.want)
				}
			}
			r.send("RSET\r\n")
			r.expect("250")
			queuedID(t, r.transaction(" BODY=8BITMIME", simple))
		})
	}
}

// TestSMTPUTF8: a message goes on with SMTPUTF8 when the client said it and
// something may need it; plain ASCII mail from a library that says SMTPUTF8
// whenever it is offered (Go's net/smtp) goes on without, so that an
// upstream that lacks the extension still takes it.
func TestSMTPUTF8(t *testing.T) {
	tests := []struct {
		name, from, to, data string
		utf8, eightBit       bool
	}{
		{"utf-8 addresses and header", "josé@exämple.com", "zoë@example.net", "From: José <josé@exämple.com>\r\nSubject: caffè\r\n\r\nciao\r\n", true, true},
		{"utf-8 recipient only", "app@example.com", "zoë@example.net", "From: app@example.com\r\nSubject: hello\r\n\r\nciao\r\n", true, false},
		{"8-bit header", "app@example.com", "user@example.net", "From: app@example.com\r\nSubject: caffè\r\n\r\nciao\r\n", true, true},
		{"plain ascii", "app@example.com", "user@example.net", "From: app@example.com\r\nSubject: hello\r\n\r\nciao\r\n", false, false},
	}
	e := newEnv(t, nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := dialEHLO(t, e.addr)
			r.send("MAIL FROM:<" + tt.from + "> SMTPUTF8 BODY=8BITMIME\r\n")
			r.expect("250")
			r.send("RCPT TO:<" + tt.to + ">\r\n")
			r.expect("250")
			r.send("DATA\r\n")
			r.expect("354")
			r.send(tt.data + ".\r\n")
			id := queuedID(t, r.reply())
			m, _ := e.store.Get(context.Background(), id)
			if m.Envelope.SMTPUTF8 != tt.utf8 || m.Envelope.EightBit != tt.eightBit || m.Envelope.Recipients[0] != tt.to {
				t.Errorf("envelope %+v; want SMTPUTF8 %v, 8-bit %v", m.Envelope, tt.utf8, tt.eightBit)
			}
		})
	}
}

func TestControlHeadersRecordedAndRemoved(t *testing.T) {
	e := newEnv(t, nil)
	r := dialEHLO(t, e.addr)
	id := queuedID(t, r.transaction("", "From: a@example.com\r\nX-Postino-Priority: 1\r\nX-Postino-Batch: promo-7\r\n"+
		"X-Postino-Send-After: 2027-01-02T03:04:05Z\r\nSubject: s\r\n\r\nbody\r\n.\r\n"))
	m, _ := e.store.Get(context.Background(), id)
	if m.Priority != 1 || m.Batch != "promo-7" || !m.DueAt.Equal(time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Errorf("priority %d batch %q due %v", m.Priority, m.Batch, m.DueAt)
	}
	if m.Envelope.Control["X-Postino-Batch"] != "promo-7" {
		t.Errorf("control values %v", m.Envelope.Control)
	}
	if body := e.readSpool(t, m); strings.Contains(strings.ToLower(body), "x-postino") {
		t.Errorf("control headers left in the spool file:\n%s", body)
	}
}

func TestIdempotentMailID(t *testing.T) {
	e := newEnv(t, nil)
	msg := "From: a@example.com\r\nX-Genro-Mail-ID: order-1234\r\nMessage-ID: <m1@example.com>\r\n\r\nfirst\r\n.\r\n"
	for i := range 3 {
		r := dialEHLO(t, e.addr)
		data := msg
		if i > 0 {
			data = strings.Replace(msg, "first", fmt.Sprint("try ", i), 1)
		}
		if id := queuedID(t, r.transaction("", data)); id != "order-1234" {
			t.Fatalf("queued as %s, want order-1234", id)
		}
	}
	if n := e.count(t); n != 1 {
		t.Errorf("%d rows for one id", n)
	}
	files := e.spoolFiles(t)
	if len(files) != 1 {
		t.Fatalf("%d spool files for one id", len(files))
	}
	m, _ := e.store.Get(context.Background(), "order-1234")
	if body := e.readSpool(t, m); !strings.Contains(body, "first") || strings.Count(body, "X-Genro-Mail-ID") != 1 {
		t.Errorf("the first submission must be the one kept, with its id once:\n%s", body)
	}
	if ms, _ := e.store.ByMessageID(context.Background(), "m1@example.com"); len(ms) != 1 {
		t.Errorf("Message-ID index finds %d", len(ms))
	}
}

func TestConcurrentSameMailID(t *testing.T) {
	e := newEnv(t, nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			c, err := smtp.Dial(e.addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			err = c.SendMail("a@example.com", []string{"b@example.net"},
				strings.NewReader("From: a@example.com\r\nX-Genro-Mail-ID: same-one\r\n\r\nx\r\n"))
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := e.count(t); n != 1 {
		t.Errorf("%d rows", n)
	}
	if f := e.spoolFiles(t); len(f) != 1 {
		t.Errorf("%d spool files", len(f))
	}
}

// TestSmuggling sends the sequences that some servers read as the end of
// data: everything up to the real CRLF.CRLF must stay one message, and the
// commands hidden in it must not run.
func TestSmuggling(t *testing.T) {
	for _, tt := range []struct {
		name string
		dot  string
	}{
		{"lf dot lf", "\n.\n"},
		{"cr dot cr", "\r.\r"},
		{"lf dot crlf", "\n.\r\n"},
		{"crlf dot lf", "\r\n.\n"},
		{"cr dot crlf", "\r.\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil)
			r := dialEHLO(t, e.addr)
			data := "From: a@example.com\r\n\r\nvisible" + tt.dot +
				"MAIL FROM:<evil@example.com>\r\nRCPT TO:<victim@example.net>\r\nDATA\r\nFrom: evil@example.com\r\n\r\nsmuggled\r\n.\r\n"
			id := queuedID(t, r.transaction("", data))
			r.send("NOOP\r\n")
			r.expect("250")
			if n := e.count(t); n != 1 {
				t.Fatalf("%d messages stored, want 1", n)
			}
			m, _ := e.store.Get(context.Background(), id)
			body := e.readSpool(t, m)
			if !strings.Contains(body, "smuggled") || !strings.Contains(body, "MAIL FROM:<evil@example.com>") {
				t.Errorf("the smuggled part is not in the one message:\n%q", body)
			}
			if strings.Contains(strings.ReplaceAll(body, "\r\n", ""), "\r") || strings.Contains(strings.ReplaceAll(body, "\r\n", ""), "\n") {
				t.Errorf("a bare CR or LF survived:\n%q", body)
			}
		})
	}
}

func TestBareNewlinesRejected(t *testing.T) {
	e := newEnv(t, func(c *intake.Config) { c.RejectBareNewlines = true })
	r := dialEHLO(t, e.addr)
	if got := r.transaction("", "From: a@example.com\r\n\r\nx\n.\nMAIL FROM:<e@example.com>\r\n.\r\n"); !strings.HasPrefix(got, "554 5.6.0") {
		t.Fatalf("reply %q", got)
	}
	if n := e.count(t); n != 0 {
		t.Errorf("%d rows", n)
	}
}

func TestChunking(t *testing.T) {
	e := newEnv(t, nil)
	r := dialEHLO(t, e.addr)
	r.send("MAIL FROM:<app@example.com>\r\nRCPT TO:<user@example.net>\r\n")
	r.expect("250")
	r.expect("250")
	part1 := "From: a@example.com\r\nSubject: chunks\r\n\r\n"
	part2 := ".leading dot stays\r\nend\r\n"
	r.send(fmt.Sprintf("BDAT %d\r\n%s", len(part1), part1))
	r.expect("250")
	r.send(fmt.Sprintf("BDAT %d LAST\r\n%s", len(part2), part2))
	id := queuedID(t, r.reply())
	m, _ := e.store.Get(context.Background(), id)
	if body := e.readSpool(t, m); !strings.HasSuffix(body, "\r\n\r\n.leading dot stays\r\nend\r\n") {
		t.Errorf("body %q", body)
	}
}

func TestPipelining(t *testing.T) {
	e := newEnv(t, nil)
	r := dialRaw(t, e.addr)
	r.send("EHLO app.local\r\nMAIL FROM:<a@example.com>\r\nRCPT TO:<b@example.net>\r\nRCPT TO:<c@example.net>\r\nDATA\r\n")
	for _, want := range []string{"250", "250", "250", "250", "354"} {
		r.expect(want)
	}
	r.send(simple + "QUIT\r\n")
	queuedID(t, r.reply())
	r.expect("221")
}

func TestAuth(t *testing.T) {
	secure := func(c *intake.Config) {
		c.TLS = &tls.Config{}
		c.Accounts = intake.Accounts{"app": "s3cret"}
		c.AllowNetworks = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} // the test client is not in it
	}
	dialTLS := func(t *testing.T, e *env) *smtp.Client {
		c, err := smtp.DialStartTLS(e.addr, e.cert.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	t.Run("required", func(t *testing.T) {
		e := newEnv(t, secure)
		c := dialTLS(t, e)
		err := c.Mail("a@example.com", nil)
		var se *smtp.SMTPError
		if !errors.As(err, &se) || se.Code != 530 {
			t.Fatalf("MAIL without AUTH: %v, want 530", err)
		}
	})
	for _, mech := range []struct {
		name   string
		client func(user, pw string) sasl.Client
	}{
		{"PLAIN", func(u, p string) sasl.Client { return sasl.NewPlainClient("", u, p) }},
		{"LOGIN", sasl.NewLoginClient},
	} {
		t.Run(mech.name, func(t *testing.T) {
			e := newEnv(t, secure)
			c := dialTLS(t, e)
			err := c.Auth(mech.client("app", "wrong"))
			var se *smtp.SMTPError
			if !errors.As(err, &se) || se.Code != 535 {
				t.Fatalf("wrong password: %v, want 535", err)
			}
			c = dialTLS(t, e)
			if err := c.Auth(mech.client("app", "s3cret")); err != nil {
				t.Fatal(err)
			}
			if err := c.SendMail("a@example.com", []string{"b@example.net"}, strings.NewReader("From: a@example.com\r\n\r\nx\r\n")); err != nil {
				t.Fatal(err)
			}
			page, _, _ := e.store.List(context.Background(), backends.ListQuery{Limit: 5})
			if len(page) != 1 || page[0].Envelope.AuthUser != "app" || !page[0].Envelope.TLS {
				t.Errorf("stored %+v", page)
			}
			if body := e.readSpool(t, page[0]); !strings.Contains(body, "with ESMTPSA") {
				t.Errorf("Received field does not say ESMTPSA:\n%s", body)
			}
		})
	}
	t.Run("not over plain text", func(t *testing.T) {
		e := newEnv(t, secure)
		r := dialEHLO(t, e.addr)
		r.send("AUTH PLAIN AGFwcABzM2NyZXQ=\r\n")
		r.expect("523 5.7.10")
	})
}

func TestClientOutsideNetworks(t *testing.T) {
	e := newEnv(t, func(c *intake.Config) { c.AllowNetworks = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")} })
	r := dialRaw(t, e.addr)
	r.send("EHLO app.local\r\n")
	r.expect("554 5.7.1")
}

func TestOutboxFailure(t *testing.T) {
	e := newEnv(t, nil)
	e.store.Close() // the outbox is gone: writes fail
	r := dialEHLO(t, e.addr)
	if got := r.transaction("", simple); !strings.HasPrefix(got, "451 4.3.0") {
		t.Fatalf("reply %q, want 451 4.3.0", got)
	}
	if f := e.spoolFiles(t); len(f) != 0 {
		t.Errorf("spool files left after a failed commit: %v", f)
	}
}

func TestSpoolFailure(t *testing.T) {
	e := newEnv(t, nil)
	// A file where the day's bucket directory should go: creating it fails.
	day := time.Now().UTC().Format("20060102")
	if err := os.WriteFile(filepath.Join(e.spool.Dir(), day), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := dialEHLO(t, e.addr)
	got := r.transaction("", simple)
	if !strings.HasPrefix(got, "451 4.3.0") {
		t.Fatalf("reply %q, want 451 4.3.0", got)
	}
	// The client learns what failed, not where: the path is the log's.
	if strings.Contains(got, e.spool.Dir()) {
		t.Errorf("reply %q names the spool's path", got)
	}
	if !strings.Contains(e.logs.String(), filepath.Join(e.spool.Dir(), day)) {
		t.Errorf("the log does not name the path that failed:\n%s", e.logs.String())
	}
	if n := e.count(t); n != 0 {
		t.Errorf("%d rows after a spool failure", n)
	}
	// The cause clears: the relay serves again.
	os.Remove(filepath.Join(e.spool.Dir(), day))
	queuedID(t, r.transaction("", simple))
}
