package relay_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/mail"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/postgres"
	"github.com/genropy/postino/backends/postgres/pgtest"
	"github.com/genropy/postino/internal/testrig/dkimtest"
	"github.com/genropy/postino/internal/testrig/imaptest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/unsubscribe"
)

// unsubBase is the unsubscribe.base_url of the tests: the ingress, which
// the tests play by sending its requests to the listener.
const unsubBase = "https://unsub.test"

// listUnsubscribe is the List-Unsubscribe a bulk copy gets: the https:
// link and the mailto: of the same token.
var listUnsubscribe = regexp.MustCompile(`^<` + regexp.QuoteMeta(unsubBase) + `/u/([A-Za-z0-9_-]+)>, <mailto:unsubscribe@example\.com\?subject=([^>]+)>$`)

// copiesOf waits for the upstream to hold n copies of the message whose
// X-Genro-Mail-ID is id, and returns them by recipient.
func copiesOf(t *testing.T, up *smtptest.Server, id string, n int) map[string]smtptest.Message {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := map[string]smtptest.Message{}
		for _, m := range up.Messages() {
			if m.Header("X-Genro-Mail-ID") == id {
				for _, to := range m.To {
					got[to] = m
				}
			}
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the upstream holds copies of %s for %d recipients, want %d", id, len(got), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// header parses a received message's header, its folded fields unfolded.
func header(t *testing.T, data []byte) mail.Header {
	t.Helper()
	m, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return m.Header
}

// signedFields are the h= of every DKIM-Signature of a message, lower case.
func signedFields(t *testing.T, h mail.Header) [][]string {
	t.Helper()
	var out [][]string
	for _, sig := range h["Dkim-Signature"] {
		var fields []string
		for tag := range strings.SplitSeq(sig, ";") {
			name, v, _ := strings.Cut(strings.TrimSpace(tag), "=")
			if name != "h" {
				continue
			}
			for f := range strings.SplitSeq(v, ":") {
				fields = append(fields, strings.ToLower(strings.Join(strings.Fields(f), "")))
			}
		}
		out = append(out, fields)
	}
	return out
}

// unsubscribeKey writes a key for the links, readable by its owner only.
func unsubscribeKey(t *testing.T) string {
	t.Helper()
	secret := make([]byte, 32)
	rand.Read(secret)
	path := filepath.Join(t.TempDir(), "unsubscribe.key")
	if err := os.WriteFile(path, []byte(base64.StdEncoding.EncodeToString(secret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// curl runs the real curl on a link, sent to the listener at addr in
// place of the ingress the link names, and returns the status and body.
// Without curl the test is skipped, or fails under CI=true.
func curl(t *testing.T, addr, link string, args ...string) (int, string) {
	t.Helper()
	path, err := exec.LookPath("curl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("curl is missing: make test installs it (.ci/deps)")
		}
		t.Skipf("curl is missing: apt-get install -y curl")
	}
	target, ok := strings.CutPrefix(link, unsubBase)
	if !ok {
		t.Fatalf("link %s is not under %s", link, unsubBase)
	}
	body := filepath.Join(t.TempDir(), "body")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args = append(args, "-s", "-o", body, "-w", "%{http_code}", "http://"+addr+target)
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	status, err := strconv.Atoi(string(out))
	if err != nil {
		t.Fatalf("curl printed %q, want a status", out)
	}
	b, err := os.ReadFile(body)
	if err != nil {
		t.Fatal(err)
	}
	return status, string(b)
}

// waitSuppressions waits until the address has n entries.
func waitSuppressions(t *testing.T, s backends.Suppressions, addr string, n int) []backends.Suppression {
	t.Helper()
	deadline := time.Now().Add(bounceWait)
	for {
		got, err := s.SuppressionsOf(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s has %d suppression entries, want %d", addr, len(got), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkBulkCopy checks a recipient's copy of a bulk message: sent to that
// recipient alone, with List-Unsubscribe (the https: link and the mailto:,
// whose token names the recipient) and List-Unsubscribe-Post, both signed
// by a DKIM signature that verifies. It returns the link and the subject
// of the mailto:.
func checkBulkCopy(t *testing.T, m smtptest.Message, keys *unsubscribe.Keys, records dkimtest.Records, want unsubscribe.Target) (link, subject string) {
	t.Helper()
	rcpt := want.Recipient
	if len(m.To) != 1 {
		t.Errorf("a bulk copy went to %v: each recipient needs a transaction of its own", m.To)
	}
	h := header(t, m.Data)
	lu := listUnsubscribe.FindStringSubmatch(h.Get("List-Unsubscribe"))
	if lu == nil {
		t.Fatalf("%s's copy: List-Unsubscribe %q, want the https: link and the mailto:", rcpt, h.Get("List-Unsubscribe"))
	}
	if post := h.Get("List-Unsubscribe-Post"); post != "List-Unsubscribe=One-Click" {
		t.Errorf("%s's copy: List-Unsubscribe-Post %q", rcpt, post)
	}
	subject, err := url.QueryUnescape(lu[2])
	if err != nil || subject != "unsubscribe "+lu[1] {
		t.Errorf("%s's copy: the mailto:'s subject is %q (%v), want unsubscribe and the link's token", rcpt, subject, err)
	}
	if target, err := keys.Verify(lu[1], time.Now()); err != nil || target != want {
		t.Errorf("%s's copy: the token names %+v (%v), want %+v", rcpt, target, err, want)
	}
	dkimtest.Verify(t, m.Data, records)
	for _, signed := range signedFields(t, h) {
		if !slices.Contains(signed, "list-unsubscribe") || !slices.Contains(signed, "list-unsubscribe-post") {
			t.Errorf("%s's copy: DKIM h=%s leaves the unsubscribe fields unsigned", rcpt, strings.Join(signed, ":"))
		}
	}
	return unsubBase + "/u/" + lu[1], subject
}

// TestOneClickUnsubscribe follows a bulk message from the relay to its
// recipients' unsubscribes: each copy carries its recipient's signed
// links, DKIM covers them, the https link honoured with curl (a GET only
// asks; a changed token is refused as a truncated one is) and the mailto:
// through the bounce mailbox each put the recipient on the stream's list,
// which holds back the stream's next message and not a transactional one.
// The outbox is PostgreSQL, for the test to read the list beside the relay.
func TestOneClickUnsubscribe(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Migrated(t)
	store, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	imap := imaptest.Start(t, imaptest.Options{})
	cfg, up, out := bounceRelay(t, memMailbox(imap))
	cfg.Outbox.Backend, cfg.Outbox.Postgres.DSN = "postgres", dsn
	dkimConf, dkimName, dkimRec := dkimKey(t, t.TempDir(), "example.com", "news2026", "rsa", true)
	records := dkimtest.Records{dkimName: dkimRec}
	cfg.DKIM.Keys = []relay.DKIMKey{dkimConf}
	keyFile := unsubscribeKey(t)
	cfg.Streams = []relay.StreamConfig{{Name: "news", Bulk: true}}
	cfg.Unsubscribe.Listen, cfg.Unsubscribe.BaseURL, cfg.Unsubscribe.Mailto = "127.0.0.1:0", unsubBase, "unsubscribe@example.com"
	cfg.Unsubscribe.Keys = []string{"file:" + keyFile}
	keys, err := unsubscribe.LoadKeys(time.Hour, cfg.Unsubscribe.Keys)
	if err != nil {
		t.Fatal(err)
	}
	rl := start(t, cfg)
	smtpAddr, listener := rl.r.SMTPAddr().String(), rl.r.UnsubscribeAddr().String()

	const alice, bob = "alice@example.net", "bob@example.org"
	id := sendTo(t, smtpAddr, []string{alice, bob}, "X-Postino-Stream: news\r\n", "this week's news\r\n")
	links, mailtos := map[string]string{}, map[string]string{}
	for rcpt, m := range copiesOf(t, up, id, 2) {
		links[rcpt], mailtos[rcpt] = checkBulkCopy(t, m, keys, records, unsubscribe.Target{Stream: "news", Recipient: rcpt, MessageID: id})
	}
	if links[alice] == links[bob] {
		t.Fatal("both recipients got the same link")
	}
	waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")

	// A GET, as a mail scanner's, only asks.
	status, body := curl(t, listener, links[alice])
	if status != 200 || !strings.Contains(body, "Stop these messages to a***@example.net?") || !strings.Contains(body, `<form method="post">`) {
		t.Errorf("GET: %d\n%s", status, body)
	}
	// A token changed in one character is refused as a cut one is.
	token := strings.TrimPrefix(links[alice], unsubBase+"/u/")
	i := len(token) / 2
	swap := byte('A')
	if token[i] == 'A' {
		swap = 'B'
	}
	tampered := unsubBase + "/u/" + token[:i] + string(swap) + token[i+1:]
	tamperedStatus, tamperedBody := curl(t, listener, tampered, "-X", "POST", "-d", "List-Unsubscribe=One-Click")
	cutStatus, cutBody := curl(t, listener, links[alice][:len(links[alice])-5], "-X", "POST", "-d", "List-Unsubscribe=One-Click")
	if tamperedStatus != 400 || cutStatus != 400 || tamperedBody != cutBody {
		t.Errorf("tampered token: %d, truncated: %d; want 400 for both, with the same body:\n%s\n%s", tamperedStatus, cutStatus, tamperedBody, cutBody)
	}
	if got, err := store.SuppressionsOf(ctx, alice); err != nil || len(got) != 0 {
		t.Fatalf("after a GET and two bad tokens, %s has entries %+v (%v)", alice, got, err)
	}

	status, body = curl(t, listener, links[alice], "-X", "POST", "-d", "List-Unsubscribe=One-Click")
	if status != 200 || !strings.Contains(body, "You are unsubscribed") {
		t.Fatalf("one-click POST: %d\n%s", status, body)
	}
	entries := waitSuppressions(t, store, alice, 1)
	if e := entries[0]; len(entries) != 1 || e.Scope != "news" || e.Reason != backends.ReasonUnsubscribe || !e.Active || e.MessageID != id {
		t.Errorf("%s's entries after the POST: %+v", alice, entries)
	}
	ev := waitEvents(t, out, id, relay.EventUnsubscribed, 1)[0]
	if !strings.Contains(ev.Reason, alice+" unsubscribed from news by https") {
		t.Errorf("UNSUBSCRIBED event %+v", ev)
	}

	// The stream's next message is held back; a transactional one is not.
	next := sendTo(t, smtpAddr, []string{alice}, "X-Postino-Stream: news\r\n", "next week's news\r\n")
	reset := sendTo(t, smtpAddr, []string{alice}, "", "your password reset\r\n")
	m := waitStatus(t, rl.client, next, "SUPPRESSED-ACKNOWLEDGED")
	if r := recipient(m, alice); r.Status != "suppressed" {
		t.Errorf("%s in the suppressed message: %+v", alice, r)
	}
	waitStatus(t, rl.client, reset, "SENT-ACKNOWLEDGED")
	if c := copiesOf(t, up, reset, 1)[alice]; bytes.Contains(c.Data, []byte("List-Unsubscribe")) {
		t.Error("a transactional message got List-Unsubscribe")
	}
	for _, got := range up.Messages() {
		if got.Header("X-Genro-Mail-ID") == next {
			t.Errorf("the suppressed message reached the upstream: %v", got.To)
		}
	}

	// The mailto: reaches the bounce mailbox, which the relay reads.
	memBox{imap}.Append(t, "INBOX", []byte("From: <"+bob+">\r\nTo: <unsubscribe@example.com>\r\nSubject: "+mailtos[bob]+
		"\r\nDate: Sat, 21 Nov 2026 12:00:00 +0000\r\nMessage-ID: <unsub-1@example.org>\r\n\r\n\r\n"))
	entries = waitSuppressions(t, store, bob, 1)
	if e := entries[0]; len(entries) != 1 || e.Scope != "news" || e.Reason != backends.ReasonUnsubscribe || !e.Active {
		t.Errorf("%s's entries after the mailto: %+v", bob, entries)
	}
	var byMail bool
	for _, e := range waitEvents(t, out, id, relay.EventUnsubscribed, 2) {
		byMail = byMail || strings.Contains(e.Reason, bob+" unsubscribed from news by mailto")
	}
	if !byMail {
		t.Errorf("no UNSUBSCRIBED event of %s by mailto: %+v", bob, eventsOf(t, out, id, relay.EventUnsubscribed))
	}
}
