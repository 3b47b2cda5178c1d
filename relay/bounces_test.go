package relay_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/internal/testrig/dovecottest"
	"github.com/genropy/postino/internal/testrig/imaptest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/plugins/sdk"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
)

// dsn makes the RFC 3464 report a receiving server would send about the
// message the upstream received, its headers returned.
func dsn(delivered []byte, rcpt, action, status, diagnostic string) []byte {
	head, _, _ := bytes.Cut(delivered, []byte("\r\n\r\n"))
	id := fmt.Sprintf("dsn-%d@mx.example.net", time.Now().UnixNano())
	return []byte(strings.Join([]string{
		"From: Mail Delivery System <MAILER-DAEMON@mx.example.net>",
		"To: bounces@example.com",
		"Subject: Undelivered Mail Returned to Sender",
		"Message-ID: <" + id + ">",
		"Date: Sat, 21 Nov 2026 12:00:00 +0000",
		"Auto-Submitted: auto-replied",
		"MIME-Version: 1.0",
		`Content-Type: multipart/report; report-type=delivery-status; boundary="RB"`,
		"",
		"--RB",
		"Content-Type: text/plain",
		"",
		"I'm sorry to have to inform you that your message could not be delivered.",
		"",
		"--RB",
		"Content-Type: message/delivery-status",
		"",
		"Reporting-MTA: dns; mx.example.net",
		"Arrival-Date: Sat, 21 Nov 2026 11:59:00 +0000",
		"",
		"Final-Recipient: rfc822; " + rcpt,
		"Original-Recipient: rfc822; " + rcpt,
		"Action: " + action,
		"Status: " + status,
		"Remote-MTA: dns; mx.example.net",
		"Diagnostic-Code: smtp; " + diagnostic,
		"",
		"--RB",
		"Content-Type: text/rfc822-headers",
		"",
		string(head),
		"",
		"--RB--",
		"",
	}, "\r\n"))
}

// imapBox is what the tests need of an IMAP server, the in-memory one or
// Dovecot.
type imapBox interface {
	Append(t testing.TB, folder string, msg []byte)
	count(t testing.TB, folder string) int
}

type memBox struct{ *imaptest.Server }

func (b memBox) count(t testing.TB, folder string) int { return len(b.Messages(t, folder)) }

type dovecotBox struct{ *dovecottest.Server }

func (b dovecotBox) Append(t testing.TB, folder string, msg []byte) { b.Server.Append(t, folder, msg) }
func (b dovecotBox) count(t testing.TB, folder string) int          { return len(b.Messages(t, folder)) }

// bounceRelay is a relay with a test plugin and one bounce mailbox.
func bounceRelay(t *testing.T, mc relay.MailboxConfig) (relay.Config, *smtptest.Server, string) {
	t.Helper()
	cfg, up := testConfig(t)
	out := testPlugin(t, &cfg, "ok", nil)
	pw := filepath.Join(t.TempDir(), "imap-password")
	os.WriteFile(pw, []byte("secret\n"), 0o600)
	if mc.PasswordFile == "" {
		mc.PasswordFile = pw
	}
	mc.Poll = relay.Duration(100 * time.Millisecond)
	cfg.Bounces.Mailboxes = []relay.MailboxConfig{mc}
	return cfg, up, out
}

func memMailbox(srv *imaptest.Server) relay.MailboxConfig {
	host, port, _ := strings.Cut(srv.Addr, ":")
	var p int
	fmt.Sscan(port, &p)
	return relay.MailboxConfig{Name: "bounces", Host: host, Port: p, TLS: "none", Username: srv.User}
}

func eventsOf(t *testing.T, out, id, outcome string) []sdk.Event {
	var got []sdk.Event
	for _, e := range received(t, out) {
		if e.MessageID == id && e.Outcome == outcome {
			got = append(got, e)
		}
	}
	return got
}

// bounceWait bounds the waits for what a bounce mailbox brings: a mailbox
// read on a loaded machine takes a few seconds per hundred bounces.
const bounceWait = time.Minute

func waitEvents(t *testing.T, out, id, outcome string, n int) []sdk.Event {
	t.Helper()
	deadline := time.Now().Add(bounceWait)
	for {
		got := eventsOf(t, out, id, outcome)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s got %d %s events, want %d", id, len(got), outcome, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitCount(t *testing.T, box imapBox, folder string, n int) {
	t.Helper()
	deadline := time.Now().Add(bounceWait)
	for box.count(t, folder) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d messages, want %d", folder, box.count(t, folder), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// onlyOneEvent checks that message id holds one event of the outcome and
// that the plugin was told it once. A bounce recorded again would be in
// the outbox before its copy left the folder, so the outbox is read as
// soon as the copy is put away; the plugin's count is read once every
// such event is acknowledged, when it can no longer grow.
func onlyOneEvent(t *testing.T, rl *running, out, id, outcome string) {
	t.Helper()
	m := waitMessage(t, rl.client, id, func(m admin.Message) bool {
		for _, e := range m.Events {
			if e.Outcome == outcome && e.State != "acked" {
				return false
			}
		}
		return true
	})
	n := 0
	for _, e := range m.Events {
		if e.Outcome == outcome {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%s holds %d %s events, want 1", id, n, outcome)
	}
	if n := len(eventsOf(t, out, id, outcome)); n != 1 {
		t.Errorf("the plugin was told %d %s events of %s, want 1", n, outcome, id)
	}
}

// deliveredCopy sends one message through the relay and returns its id
// and the bytes the upstream received.
func deliveredCopy(t *testing.T, rl *running, up *smtptest.Server, rcpt string) (string, []byte) {
	t.Helper()
	id := sendTo(t, rl.r.SMTPAddr().String(), []string{rcpt}, "", "hello\r\n")
	waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	return id, receivedByUpstream(t, up, id).Data
}

func TestBounceEndToEnd(t *testing.T) {
	srv := imaptest.Start(t, imaptest.Options{})
	cfg, up, out := bounceRelay(t, memMailbox(srv))
	rl := start(t, cfg)
	box := memBox{srv}

	id, delivered := deliveredCopy(t, rl, up, "gone@example.net")
	bounce := dsn(delivered, "gone@example.net", "failed", "5.1.1", "550 5.1.1 <gone@example.net>: Recipient address rejected: User unknown")
	box.Append(t, "INBOX", bounce)
	m := waitStatus(t, rl.client, id, "BOUNCED-ACKNOWLEDGED")
	if got := statuses(m); !strings.HasSuffix(got, "SENT-ACKNOWLEDGED BOUNCED CALLING-BOUNCED-CALLBACK BOUNCED-ACKNOWLEDGED") {
		t.Errorf("history %s", got)
	}
	e := waitEvents(t, out, id, "BOUNCED", 1)[0]
	b := e.Bounce
	if b == nil || b.Kind != "bounce" || b.Type != "hard" || b.ReportingMTA != "mx.example.net" || b.MatchedBy != "X-Genro-Mail-ID" || len(b.Recipients) != 1 {
		t.Fatalf("BOUNCED event %+v bounce %+v", e, b)
	}
	r := b.Recipients[0]
	if r.FinalRecipient != "gone@example.net" || r.Status != "5.1.1" || r.SMTPCode != 550 || r.Reason != "user_unknown" ||
		r.Verdict != "hard" || r.NotRecipient || r.RemoteMTA != "mx.example.net" || !strings.Contains(r.Diagnostic, "User unknown") {
		t.Errorf("bounced recipient %+v", r)
	}
	if e.PreviousStatus != "SENT-ACKNOWLEDGED" || !strings.Contains(e.Reason, "gone@example.net") || e.RFC822MessageID == "" {
		t.Errorf("BOUNCED event %+v", e)
	}
	// The reason says the codes once, and the message says why it bounced.
	if strings.Count(e.Reason, "5.1.1") != 1 {
		t.Errorf("BOUNCED event's reason repeats the code: %q", e.Reason)
	}
	if m.Reason != e.Reason {
		t.Errorf("bounced message's reason %q, want the bounce's %q", m.Reason, e.Reason)
	}
	for _, h := range m.History {
		if h.Status == "BOUNCED" && h.Reason != e.Reason {
			t.Errorf("BOUNCED history row says %q, want the bounce's %q", h.Reason, e.Reason)
		}
	}
	waitCount(t, box, "Processed", 1)

	// The same bounce again (a second copy from the server): recorded once.
	box.Append(t, "INBOX", bounce)
	waitCount(t, box, "Processed", 2)
	onlyOneEvent(t, rl, out, id, "BOUNCED")

	// A delay notice is told to plugins and changes no status.
	id2, delivered2 := deliveredCopy(t, rl, up, "slow@example.org")
	box.Append(t, "INBOX", dsn(delivered2, "slow@example.org", "delayed", "4.2.2", "452 4.2.2 Mailbox full, will retry"))
	d := waitEvents(t, out, id2, "DELAYED", 1)[0]
	if d.Bounce == nil || d.Bounce.Kind != "delay" || d.Bounce.Recipients[0].Status != "4.2.2" {
		t.Errorf("DELAYED event %+v", d.Bounce)
	}
	if m := waitStatus(t, rl.client, id2, "SENT-ACKNOWLEDGED"); strings.Contains(statuses(m), "BOUNCED") {
		t.Errorf("a delay moved the message: %s", statuses(m))
	}
	// The mailbox counts a message after it is put away, which may be after
	// the plugin was told of it.
	body := scrapeUntil(t, rl, `postino_mailbox_messages_total{mailbox="bounces",verdict="processed"} 3`)
	for _, want := range []string{`postino_mailbox_up{mailbox="bounces"} 1`, `postino_bounce_reports_total{kind="bounce",verdict="processed"} 1`,
		`postino_bounce_reports_total{kind="bounce",verdict="duplicate"} 1`,
		`postino_mailbox_messages_total{mailbox="bounces",verdict="processed"} 3`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grep(body, "mailbox"))
		}
	}
}

// TestBounceNotRecipient: a bounce about an address the message was not
// sent to (the next hop of a forward) is the message's bounce, but the
// address gets no verdict, and the plugins are told so.
func TestBounceNotRecipient(t *testing.T) {
	srv := imaptest.Start(t, imaptest.Options{})
	cfg, up, out := bounceRelay(t, memMailbox(srv))
	rl := start(t, cfg)
	id, delivered := deliveredCopy(t, rl, up, "alice@example.net")
	memBox{srv}.Append(t, "INBOX", dsn(delivered, "alice.fwd@elsewhere.example.org", "failed", "5.1.1",
		"550 5.1.1 <alice.fwd@elsewhere.example.org>: Recipient address rejected: User unknown"))
	e := waitEvents(t, out, id, "BOUNCED", 1)[0]
	if b := e.Bounce; b == nil || b.Type != "soft" || len(b.Recipients) != 1 {
		t.Fatalf("BOUNCED event's bounce %+v", e.Bounce)
	}
	if r := e.Bounce.Recipients[0]; r.FinalRecipient != "alice.fwd@elsewhere.example.org" || !r.NotRecipient || r.Verdict != "" || r.Reason != "user_unknown" {
		t.Errorf("bounced address %+v", r)
	}
	if !strings.Contains(e.Reason, "not a recipient of the message") {
		t.Errorf("BOUNCED event's reason %q", e.Reason)
	}
}

// TestBounceMailboxOfJunk: what is not a bounce of a known message goes to
// Unmatched, and never stops the bounce that follows it.
func TestBounceMailboxOfJunk(t *testing.T) {
	srv := imaptest.Start(t, imaptest.Options{})
	mc := memMailbox(srv)
	cfg, up, out := bounceRelay(t, mc)
	rl := start(t, cfg)
	box := memBox{srv}
	id, delivered := deliveredCopy(t, rl, up, "gone@example.net")
	junk := [][]byte{
		[]byte("\x00\x01\x02 not a message at all \xff\xfe"),
		[]byte("From: friend@example.org\r\nSubject: lunch?\r\n\r\nsee you at noon\r\n"),
		[]byte("From: boss@example.net\r\nSubject: Out of office\r\nAuto-Submitted: auto-replied\r\n\r\nI am away until Monday.\r\n"),
		// A bounce of a message this outbox never held.
		dsn([]byte("X-Genro-Mail-ID: nobody-knows-this-id\r\nMessage-ID: <elsewhere@other.example>\r\n\r\n"), "x@example.net", "failed", "5.1.1", "550 no such user"),
		[]byte("Subject: =?broken?q?header\r\nContent-Type: multipart/mixed; boundary=\"never-closed\"\r\n\r\n--never-closed\r\nx"),
	}
	for _, j := range junk {
		box.Append(t, "INBOX", j)
	}
	box.Append(t, "INBOX", dsn(delivered, "gone@example.net", "failed", "5.1.1", "550 5.1.1 user unknown"))
	waitEvents(t, out, id, "BOUNCED", 1)
	waitCount(t, box, "Unmatched", len(junk))
	waitCount(t, box, "Processed", 1)
	waitCount(t, box, "INBOX", 0)
}

// TestBounceRestartMidPoll stops the relay while it works through a full
// mailbox and starts it again: every bounce is recorded, each once.
func TestBounceRestartMidPoll(t *testing.T) {
	srv := imaptest.Start(t, imaptest.Options{})
	cfg, up, out := bounceRelay(t, memMailbox(srv))
	box := memBox{srv}
	rl := start(t, cfg)
	// A few messages to many recipients, each of whom bounces.
	const messages, perMessage = 4, 40
	rcpts := map[string][]string{}
	var bounces [][]byte
	for m := range messages {
		var to []string
		for i := range perMessage {
			to = append(to, fmt.Sprintf("g%d-%d@example.net", m, i))
		}
		id := sendTo(t, rl.r.SMTPAddr().String(), to, "", "hello\r\n")
		waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
		delivered := receivedByUpstream(t, up, id).Data
		for _, r := range to {
			bounces = append(bounces, dsn(delivered, r, "failed", "5.1.1", "550 5.1.1 user unknown"))
		}
		rcpts[id] = to
	}
	rl.stop()
	for _, b := range bounces {
		box.Append(t, "INBOX", b)
	}
	rl = start(t, cfg)
	deadline := time.Now().Add(bounceWait)
	for box.count(t, "Processed") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("nothing processed")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rl.stop()
	left := box.count(t, "INBOX")
	if left == 0 {
		t.Fatalf("all %d bounces were read before the stop: not in the middle of the poll", len(bounces))
	}
	rl = start(t, cfg)
	waitCount(t, box, "INBOX", 0)
	for id, to := range rcpts {
		seen := map[string]int{}
		for _, e := range waitEvents(t, out, id, "BOUNCED", perMessage) {
			seen[e.Bounce.Recipients[0].FinalRecipient]++
		}
		for _, r := range to {
			if seen[r] != 1 {
				t.Errorf("%s: %d BOUNCED events", r, seen[r])
			}
		}
		waitStatus(t, rl.client, id, "BOUNCED-ACKNOWLEDGED")
	}
	t.Logf("%d of %d bounces were left at the stop", left, len(bounces))
}

// TestBounceUIDValidityChange: after the server renumbers the folder, the
// bounces read again are recognised and the new one is recorded.
func TestBounceUIDValidityChange(t *testing.T) {
	srv := imaptest.Start(t, imaptest.Options{})
	cfg, up, out := bounceRelay(t, memMailbox(srv))
	rl := start(t, cfg)
	box := memBox{srv}
	id1, d1 := deliveredCopy(t, rl, up, "a@example.net")
	id2, d2 := deliveredCopy(t, rl, up, "b@example.net")
	first := dsn(d1, "a@example.net", "failed", "5.1.1", "550 5.1.1 user unknown")
	box.Append(t, "INBOX", first)
	waitEvents(t, out, id1, "BOUNCED", 1)
	// While the relay is down the server renumbers the folder, which holds
	// the old bounce again and a new one. (A change under a live session
	// is TestDovecot's in relay/mailbox: Dovecot ends the session.)
	rl.stop()
	srv.ResetUIDValidity(t, "INBOX")
	box.Append(t, "INBOX", first)
	box.Append(t, "INBOX", dsn(d2, "b@example.net", "failed", "5.2.2", "552 5.2.2 mailbox full"))
	rl = start(t, cfg)
	e := waitEvents(t, out, id2, "BOUNCED", 1)[0]
	if e.Bounce.Recipients[0].Reason != "mailbox_full" || e.Bounce.Type != "soft" {
		t.Errorf("second bounce %+v", e.Bounce.Recipients[0])
	}
	waitCount(t, box, "INBOX", 0)
	onlyOneEvent(t, rl, out, id1, "BOUNCED")
}

func TestBounceVERP(t *testing.T) {
	srv := imaptest.Start(t, imaptest.Options{})
	cfg, up, out := bounceRelay(t, memMailbox(srv))
	cfg.Routes.Default.BounceAddress = "bounces+{id}@example.com"
	rl := start(t, cfg)
	id, _ := deliveredCopy(t, rl, up, "gone@example.net")
	if got := up.Messages()[0].From; got != "bounces+"+id+"@example.com" {
		t.Fatalf("envelope sender upstream %q", got)
	}
	// A bounce that returns nothing of the message: only its address says
	// which message it is about.
	bare := "From: MAILER-DAEMON@mx.example.net\r\nTo: bounces+" + id + "@example.com\r\nSubject: failure notice\r\n\r\n" +
		"Hi. This is the qmail-send program at mx.example.net.\r\nI'm afraid I wasn't able to deliver your message to the following addresses.\r\n" +
		"This is a permanent error; I've given up. Sorry it didn't work out.\r\n\r\n<gone@example.net>:\r\nSorry, no mailbox here by that name. (#5.1.1)\r\n"
	memBox{srv}.Append(t, "INBOX", []byte(bare))
	e := waitEvents(t, out, id, "BOUNCED", 1)[0]
	if e.Bounce.MatchedBy != "VERP" || e.Bounce.Recipients[0].FinalRecipient != "gone@example.net" {
		t.Errorf("VERP bounce %+v", e.Bounce)
	}
}

// TestBounceDovecot runs the end to end path against a real IMAP server,
// over STARTTLS.
func TestBounceDovecot(t *testing.T) {
	srv := dovecottest.Start(t, dovecottest.Options{TLS: true})
	host, port, _ := strings.Cut(srv.Addr, ":")
	var p int
	fmt.Sscan(port, &p)
	pw := filepath.Join(t.TempDir(), "pw")
	os.WriteFile(pw, []byte(srv.Password), 0o600)
	cfg, up, out := bounceRelay(t, relay.MailboxConfig{Name: "dovecot", Host: host, Port: p, TLS: "starttls", TLSCAFile: srv.CAFile,
		Username: srv.User, PasswordFile: pw, Folder: "Bounces", ProcessedFolder: "Bounces.Done", UnmatchedFolder: "Bounces.Other"})
	box := dovecotBox{srv}
	box.Append(t, "Bounces", []byte("From: x@example.org\r\nSubject: hello\r\n\r\nnot a bounce\r\n"))
	rl := start(t, cfg)
	id, delivered := deliveredCopy(t, rl, up, "gone@example.net")
	box.Append(t, "Bounces", dsn(delivered, "gone@example.net", "failed", "5.1.1", "550 5.1.1 user unknown"))
	waitStatus(t, rl.client, id, "BOUNCED-ACKNOWLEDGED")
	if e := waitEvents(t, out, id, "BOUNCED", 1)[0]; e.Bounce.Recipients[0].Reason != "user_unknown" {
		t.Errorf("bounce %+v", e.Bounce)
	}
	waitCount(t, box, "Bounces.Done", 1)
	waitCount(t, box, "Bounces.Other", 1)
}

// TestBounceMailboxDown: a mailbox that refuses the login leaves the relay
// taking and delivering mail, and /readyz says degraded.
func TestBounceMailboxDown(t *testing.T) {
	srv := imaptest.Start(t, imaptest.Options{NoUser: true})
	cfg, _, _ := bounceRelay(t, memMailbox(srv))
	rl := start(t, cfg)
	id := sendTo(t, rl.r.SMTPAddr().String(), []string{"user@example.net"}, "", "x\r\n")
	waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	deadline := time.Now().Add(bounceWait)
	for {
		body := readyz(t, rl)
		if strings.Contains(body, `"degraded"`) && strings.Contains(body, "login as bounces@example.com") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz: %s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	srv.AddUser()
	deadline = time.Now().Add(bounceWait)
	for strings.Contains(readyz(t, rl), "degraded") {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz stays degraded after the fix: %s", readyz(t, rl))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func readyz(t *testing.T, rl *running) string {
	t.Helper()
	return adminGet(t, rl, "/readyz")
}
