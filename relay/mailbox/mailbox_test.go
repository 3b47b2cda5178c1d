package mailbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/testrig/imaptest"
	"github.com/genropy/postino/internal/testrig/outboxtest"
)

// recorder is the handler of the tests: it keeps what it read, calls a
// message whose subject says "bounce" processed and anything else
// unmatched, and fails while failing is set.
type recorder struct {
	mu      sync.Mutex
	seen    []string // subjects, in the order read
	failing string   // a subject that fails, as a store that is down would
	later   int      // how many more times "early receipt" is left for later
}

func (r *recorder) Handle(_ context.Context, raw []byte) (Verdict, error) {
	subject := ""
	for _, l := range strings.Split(string(raw), "\r\n") {
		if s, ok := strings.CutPrefix(l, "Subject: "); ok {
			subject = s
			break
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing != "" && subject == r.failing {
		return 0, errors.New("the outbox is down")
	}
	if subject == "early receipt" && r.later > 0 {
		r.later--
		return Later, nil
	}
	r.seen = append(r.seen, subject)
	if strings.Contains(subject, "bounce") {
		return Processed, nil
	}
	return Unmatched, nil
}

func (r *recorder) read() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

func (r *recorder) setFailing(s string) {
	r.mu.Lock()
	r.failing = s
	r.mu.Unlock()
}

func msg(subject string) []byte {
	return []byte(fmt.Sprintf("From: MAILER-DAEMON@mx.example.net\r\nTo: bounces@example.com\r\nSubject: %s\r\nMessage-ID: <%s@mx.example.net>\r\n\r\nbody\r\n",
		subject, strings.ReplaceAll(subject, " ", "-")))
}

type fixture struct {
	srv     *imaptest.Server
	store   *bolt.Store
	handler *recorder
}

func newFixture(t *testing.T, o imaptest.Options) *fixture {
	t.Helper()
	store := outboxtest.Store(t)
	return &fixture{srv: imaptest.Start(t, o), store: store, handler: &recorder{}}
}

func (f *fixture) config(owner string) Config {
	return Config{Name: "bounces", Addr: f.srv.Addr, TLS: TLSNone, Username: f.srv.User, Password: f.srv.Password,
		Folder: "INBOX", Processed: "Processed", Unmatched: "Unmatched", Poll: 100 * time.Millisecond, Lease: time.Minute, Owner: owner}
}

// run starts a poller and returns its stop function.
func (f *fixture) run(t *testing.T, cfg Config) (*Poller, func()) {
	t.Helper()
	p := New(cfg, f.store, f.handler, slog.New(slog.NewTextHandler(io.Discard, nil)), NewMetrics(prometheus.NewRegistry()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return p, stop
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func subjects(ms []imaptest.Message) []string {
	var out []string
	for _, m := range ms {
		_, rest, _ := bytes.Cut(m.Raw, []byte("Subject: "))
		s, _, _ := bytes.Cut(rest, []byte("\r\n"))
		out = append(out, string(s))
	}
	return out
}

func TestPollAndMove(t *testing.T) {
	f := newFixture(t, imaptest.Options{})
	for _, s := range []string{"bounce one", "newsletter reply", "bounce two"} {
		f.srv.Append(t, "INBOX", msg(s))
	}
	// A long poll: what arrives later can only be seen through IDLE.
	cfg := f.config("relay-a")
	cfg.Poll = time.Hour
	p, _ := f.run(t, cfg)
	waitFor(t, "three messages", func() bool { return len(f.handler.read()) == 3 })
	if got := f.handler.read(); !slices.Equal(got, []string{"bounce one", "newsletter reply", "bounce two"}) {
		t.Errorf("read %v, want UID order", got)
	}
	waitFor(t, "the folders", func() bool { return len(f.srv.Messages(t, "INBOX")) == 0 })
	if got := subjects(f.srv.Messages(t, "Processed")); !slices.Equal(got, []string{"bounce one", "bounce two"}) {
		t.Errorf("Processed holds %v", got)
	}
	if got := subjects(f.srv.Messages(t, "Unmatched")); !slices.Equal(got, []string{"newsletter reply"}) {
		t.Errorf("Unmatched holds %v", got)
	}
	for _, m := range f.srv.Messages(t, "Processed") {
		if slices.Contains(m.Flags, imap.FlagSeen) {
			t.Errorf("the poller set \\Seen on %s: it reads with BODY.PEEK", m.Raw[:40])
		}
	}
	if err := p.Ready(); err != nil {
		t.Errorf("Ready: %v", err)
	}
	f.srv.Append(t, "INBOX", msg("bounce three"))
	waitFor(t, "the message that came during IDLE", func() bool { return len(f.handler.read()) == 4 })
}

func TestRestartResumes(t *testing.T) {
	f := newFixture(t, imaptest.Options{})
	for _, s := range []string{"bounce 1", "bounce 2", "bounce 3"} {
		f.srv.Append(t, "INBOX", msg(s))
	}
	// The store goes down at the second message: the first is done, the
	// second and third stay.
	f.handler.setFailing("bounce 2")
	p, stop := f.run(t, f.config("relay-a"))
	waitFor(t, "the first message", func() bool { return len(f.handler.read()) == 1 })
	waitFor(t, "the failure to show", func() bool { return p.Ready() != nil })
	if err := p.Ready(); !strings.Contains(err.Error(), "the outbox is down") {
		t.Errorf("Ready: %v", err)
	}
	stop()
	if got := subjects(f.srv.Messages(t, "INBOX")); !slices.Equal(got, []string{"bounce 2", "bounce 3"}) {
		t.Errorf("INBOX holds %v after the stop", got)
	}
	f.handler.setFailing("")
	f.run(t, f.config("relay-a"))
	waitFor(t, "the rest", func() bool { return len(f.handler.read()) == 3 })
	if got := f.handler.read(); !slices.Equal(got, []string{"bounce 1", "bounce 2", "bounce 3"}) {
		t.Errorf("read %v: each message once, in order", got)
	}
}

// TestLater: a message left for later, and the ones after it, are read
// again soon, in order, without an error.
func TestLater(t *testing.T) {
	f := newFixture(t, imaptest.Options{})
	f.handler.later = 2
	f.srv.Append(t, "INBOX", msg("early receipt"))
	f.srv.Append(t, "INBOX", msg("bounce after it"))
	cfg := f.config("relay-a")
	cfg.Poll = time.Hour
	p, _ := f.run(t, cfg)
	waitFor(t, "both messages", func() bool { return len(f.handler.read()) == 2 })
	if got := f.handler.read(); !slices.Equal(got, []string{"early receipt", "bounce after it"}) {
		t.Errorf("read %v", got)
	}
	if err := p.Ready(); err != nil {
		t.Errorf("Ready: %v", err)
	}
}

func TestUIDValidityChange(t *testing.T) {
	f := newFixture(t, imaptest.Options{})
	f.srv.Append(t, "INBOX", msg("bounce a"))
	f.srv.Append(t, "INBOX", msg("bounce b"))
	_, stop := f.run(t, f.config("relay-a"))
	waitFor(t, "two messages", func() bool { return len(f.handler.read()) == 2 })
	stop()
	// The server rebuilt its index: new UIDVALIDITY, UIDs from 1 again,
	// below the saved cursor.
	f.srv.ResetUIDValidity(t, "INBOX")
	f.srv.Append(t, "INBOX", msg("bounce c"))
	f.run(t, f.config("relay-a"))
	waitFor(t, "the message after the change", func() bool { return len(f.handler.read()) == 3 })
}

func TestFlagsWithoutMove(t *testing.T) {
	f := newFixture(t, imaptest.Options{RFC3501Only: true})
	f.srv.Append(t, "INBOX", msg("bounce x"))
	f.srv.Append(t, "INBOX", msg("not one"))
	_, stop := f.run(t, f.config("relay-a"))
	waitFor(t, "two messages", func() bool { return len(f.handler.read()) == 2 })
	waitFor(t, "the flags", func() bool {
		ms := f.srv.Messages(t, "INBOX")
		return len(ms) == 2 && hasKeyword(ms[0].Flags, keywordProcessed) && hasKeyword(ms[1].Flags, keywordUnmatched)
	})
	for _, m := range f.srv.Messages(t, "INBOX") {
		if !slices.Contains(m.Flags, imap.FlagSeen) {
			t.Errorf("flags %v lack \\Seen", m.Flags)
		}
	}
	stop()
	// Polling, not IDLE: a new message is seen within the poll interval,
	// and the flagged ones are not read again.
	f.srv.Append(t, "INBOX", msg("bounce y"))
	f.run(t, f.config("relay-a"))
	waitFor(t, "the third message", func() bool { return len(f.handler.read()) == 3 })
	// A fourth message proves a later poll ran: one that read the flagged
	// mail again would have read it before the fourth.
	f.srv.Append(t, "INBOX", msg("bounce z"))
	waitFor(t, "the fourth message", func() bool { return slices.Contains(f.handler.read(), "bounce z") })
	if got := f.handler.read(); len(got) != 4 {
		t.Errorf("read %v: flagged mail was read again", got)
	}
}

// hasKeyword: keywords are case-insensitive (RFC 3501 section 2.3.2), and
// servers may store them in either case.
func hasKeyword(flags []imap.Flag, kw imap.Flag) bool {
	return slices.ContainsFunc(flags, func(f imap.Flag) bool { return strings.EqualFold(string(f), string(kw)) })
}

func TestFailuresAreReported(t *testing.T) {
	t.Run("wrong credentials, then fixed", func(t *testing.T) {
		f := newFixture(t, imaptest.Options{NoUser: true})
		p, _ := f.run(t, f.config("relay-a"))
		waitFor(t, "the login failure", func() bool { return p.Ready() != errStarting && p.Ready() != nil })
		if err := p.Ready(); !strings.Contains(err.Error(), "login as bounces@example.com") || !strings.Contains(err.Error(), "check the username and the password") {
			t.Errorf("Ready: %v", err)
		}
		f.srv.AddUser()
		waitFor(t, "the retry", func() bool { return p.Ready() == nil })
	})
	t.Run("missing folder", func(t *testing.T) {
		f := newFixture(t, imaptest.Options{})
		cfg := f.config("relay-a")
		cfg.Folder = "Bounces"
		p, _ := f.run(t, cfg)
		waitFor(t, "the folder error", func() bool { return p.Ready() != errStarting && p.Ready() != nil })
		if err := p.Ready(); !strings.Contains(err.Error(), `select folder "Bounces"`) {
			t.Errorf("Ready: %v", err)
		}
	})
	t.Run("nobody listening", func(t *testing.T) {
		f := newFixture(t, imaptest.Options{})
		cfg := f.config("relay-a")
		cfg.Addr = "127.0.0.1:1"
		p, _ := f.run(t, cfg)
		waitFor(t, "the connection error", func() bool { return p.Ready() != errStarting && p.Ready() != nil })
		if err := p.Ready(); !strings.Contains(err.Error(), "connect to 127.0.0.1:1") {
			t.Errorf("Ready: %v", err)
		}
	})
}

func TestOneRelayPerMailbox(t *testing.T) {
	f := newFixture(t, imaptest.Options{})
	for i := range 5 {
		f.srv.Append(t, "INBOX", msg(fmt.Sprintf("bounce %d", i)))
	}
	a, _ := f.run(t, f.config("relay-a"))
	b, _ := f.run(t, f.config("relay-b"))
	waitFor(t, "five messages", func() bool { return len(f.handler.read()) == 5 })
	// A sixth message proves later polls ran: two relays polling the one
	// mailbox would both read it, or read the first five twice before it.
	f.srv.Append(t, "INBOX", msg("bounce last"))
	waitFor(t, "the sixth message", func() bool { return slices.Contains(f.handler.read(), "bounce last") })
	if got := f.handler.read(); len(got) != 6 {
		t.Errorf("read %d times, want 6: two relays polled the same mailbox", len(got))
	}
	if a.Ready() != nil || b.Ready() != nil {
		t.Errorf("Ready: %v, %v (the one standing by is not down)", a.Ready(), b.Ready())
	}
}

func TestCheckTLS(t *testing.T) {
	for _, tt := range []struct {
		mode, host string
		ok         bool
	}{
		{TLSImplicit, "imap.example.com", true},
		{TLSStart, "imap.example.com", true},
		{TLSNone, "127.0.0.1", true},
		{TLSNone, "::1", true},
		{TLSNone, "localhost", true},
		{TLSNone, "imap.example.com", false},
		{TLSNone, "10.0.0.1", false},
		{"ssl", "imap.example.com", false},
	} {
		if err := CheckTLS(tt.mode, tt.host); (err == nil) != tt.ok {
			t.Errorf("CheckTLS(%s, %s) = %v", tt.mode, tt.host, err)
		}
	}
}
