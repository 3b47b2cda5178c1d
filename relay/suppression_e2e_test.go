package relay_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/backends/mysql"
	"github.com/genropy/postino/backends/postgres"
	"github.com/genropy/postino/backends/postgres/pgtest"
	"github.com/genropy/postino/internal/testrig/dovecottest"
	"github.com/genropy/postino/internal/testrig/imaptest"
	"github.com/genropy/postino/internal/testrig/postfixtest"
	"github.com/genropy/postino/internal/testrig/sqltest"
	"github.com/genropy/postino/plugins/sdk"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/submissions"
)

// suppressions is what these tests read of a store's list.
type suppressions interface {
	SuppressionsOf(ctx context.Context, addr string) ([]backends.Suppression, error)
}

// waitSuppressed waits until the store holds an active entry of addr and
// scope, and returns it.
func waitSuppressed(t *testing.T, s suppressions, addr, scope string) backends.Suppression {
	t.Helper()
	deadline := time.Now().Add(bounceWait)
	for {
		entries, err := s.SuppressionsOf(context.Background(), addr)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.Scope == scope && e.Active {
				return e
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not suppressed for %s: entries %+v", addr, scope, entries)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// held checks that the message ended SUPPRESSED without an attempt, its
// recipient suppressed, and that a plugin (of any relay of outs: relays
// sharing an outbox share its events) heard why.
func held(t *testing.T, rl *running, id, reason string, outs ...string) {
	t.Helper()
	m := waitStatus(t, rl.client, id, "SUPPRESSED-ACKNOWLEDGED")
	if m.Attempts != 0 || len(m.Recipients) != 1 || m.Recipients[0].Status != "suppressed" || !strings.Contains(m.Recipients[0].Text, reason) {
		t.Errorf("%s: %d attempts, recipients %+v; want none, and the recipient suppressed for %s", id, m.Attempts, m.Recipients, reason)
	}
	deadline := time.Now().Add(bounceWait)
	for {
		var got []sdk.Event
		for _, out := range outs {
			got = append(got, eventsOf(t, out, id, "SUPPRESSED")...)
		}
		if len(got) == 1 {
			if !strings.Contains(got[0].Reason, reason) {
				t.Errorf("%s: SUPPRESSED event's reason %q lacks %s", id, got[0].Reason, reason)
			}
			return
		}
		if len(got) > 1 || time.Now().After(deadline) {
			t.Fatalf("%s: the plugins heard %d SUPPRESSED events, want 1", id, len(got))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSuppressionChain runs the whole chain on real servers: Postino hands
// a message to Postfix, which takes it for a user it does not have and
// bounces it; the DSN goes to the route's bounce address, which Postfix
// delivers into Dovecot by LMTP; Postino's bounce mailbox reads it by
// IMAP, and the address is suppressed for every stream. The next messages
// to it, by SMTP and from a submissions table, never leave.
func TestSuppressionChain(t *testing.T) {
	box := dovecottest.Start(t, dovecottest.Options{LMTP: true})
	pf := postfixtest.Start(t, postfixtest.Options{Local: "dest.test", LMTP: map[string]string{"example.test": box.LMTPAddr}})
	ctx := context.Background()
	dsn := pgtest.Migrated(t)
	app := sqltest.Database(t, "postgres")
	if err := submissions.Migrate(ctx, "postgres", app, submissions.DefaultTable); err != nil {
		t.Fatal(err)
	}
	host, port, _ := strings.Cut(box.Addr, ":")
	var p int
	fmt.Sscan(port, &p)
	pw := filepath.Join(t.TempDir(), "imap-password")
	os.WriteFile(pw, []byte(box.Password), 0o600)
	cfg, up, out := bounceRelay(t, relay.MailboxConfig{Name: "dovecot", Host: host, Port: p, TLS: "none", Username: box.User, PasswordFile: pw})
	cfg.Outbox.Backend, cfg.Outbox.Postgres.DSN = "postgres", dsn
	cfg.Routes.Default.Smarthost = pf.Addr
	cfg.Routes.Default.BounceAddress = box.User
	cfg.Submissions = []relay.SubmissionsConfig{{Driver: "postgres", DSN: app, Poll: relay.Duration(100 * time.Millisecond)}}
	rl := start(t, cfg)
	store, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	const gone = "gone@dest.test"
	first := sendTo(t, rl.r.SMTPAddr().String(), []string{gone}, "", "hello\r\n")
	if e := waitEvents(t, out, first, "BOUNCED", 1)[0]; e.Bounce == nil || e.Bounce.Type != "hard" || e.Bounce.ReportingMTA != "mx.postfix.test" {
		t.Fatalf("BOUNCED event of Postfix's DSN: %+v", e.Bounce)
	}
	e := waitSuppressed(t, store, gone, backends.ScopeAll)
	if e.Reason != backends.ReasonHardBounce || e.MessageID != first || !strings.Contains(e.Code, "5.1.1") {
		t.Errorf("entry made by Postfix's DSN: %+v", e)
	}
	if got := pf.Deliveries(gone); len(got) != 1 || !strings.Contains(got[0], "status=bounced") {
		t.Fatalf("Postfix's deliveries to %s: %q, want the one that bounced", gone, got)
	}

	bySMTP := sendTo(t, rl.r.SMTPAddr().String(), []string{gone}, "", "hello again\r\n")
	db, err := sql.Open("pgx", app)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const submitted = "chain-submitted"
	_, err = db.Exec("INSERT INTO postino_submissions (id, mail_from, rcpt_to, message) VALUES ($1, $2, $3, $4)",
		submitted, "app@example.com", []string{gone}, []byte("From: App <app@example.com>\r\nTo: "+gone+"\r\nSubject: memo\r\n\r\nA memo.\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{bySMTP, submitted} {
		held(t, rl, id, string(backends.ReasonHardBounce), out)
	}
	// A message that reaches Postfix after them shows its log is read
	// late enough to hold theirs, had they come.
	later := sendTo(t, rl.r.SMTPAddr().String(), []string{"other@dest.test"}, "", "hello\r\n")
	waitEvents(t, out, later, "BOUNCED", 1)
	if got := pf.Deliveries(gone); len(got) != 1 {
		t.Errorf("Postfix's deliveries to %s: %q, want only the first message's", gone, got)
	}
	if n := len(up.Messages()); n != 0 {
		t.Errorf("the test upstream received %d messages, want them all at Postfix", n)
	}
}

// arf makes a feedback report (ARF, RFC 5965) about the message the
// upstream received, modelled on relay/bounce/testdata/arf.eml, with the
// message's header returned.
func arf(t *testing.T, delivered []byte, rcpt string) []byte {
	t.Helper()
	model, err := os.ReadFile(filepath.Join("bounce", "testdata", "arf.eml"))
	if err != nil {
		t.Fatal(err)
	}
	model = bytes.ReplaceAll(bytes.ReplaceAll(model, []byte("\r\n"), []byte("\n")), []byte("\n"), []byte("\r\n"))
	const returned = "Content-Disposition: inline\r\n\r\n"
	before, _, ok := bytes.Cut(model, []byte(returned))
	if !ok {
		t.Fatal("arf.eml has no message/rfc822 part")
	}
	head, _, _ := bytes.Cut(delivered, []byte("\r\n\r\n"))
	report := bytes.ReplaceAll(before, []byte("olga@example.net"), []byte(rcpt))
	report = bytes.ReplaceAll(report, []byte("arf-0014@fbl.example.net"), fmt.Appendf(nil, "arf-%d@fbl.example.net", time.Now().UnixNano()))
	return bytes.Join([][]byte{report, []byte(returned), head, []byte("\r\n\r\nHello.\r\n\r\n--arf_boundary_0014--\r\n")}, nil)
}

// TestComplaintStreamOnly: a complaint about a newsletter suppresses the
// address for the news stream only; its transactional mail still goes.
func TestComplaintStreamOnly(t *testing.T) {
	srv := imaptest.Start(t, imaptest.Options{})
	cfg, up, out := bounceRelay(t, memMailbox(srv))
	cfg.Streams = []relay.StreamConfig{{Name: "news"}}
	rl := start(t, cfg)
	const olga = "olga@example.net"
	smtpAddr := rl.r.SMTPAddr().String()
	news := "X-Postino-Stream: news\r\n"
	id := sendTo(t, smtpAddr, []string{olga}, news, "March\r\n")
	waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	memBox{srv}.Append(t, "INBOX", arf(t, receivedByUpstream(t, up, id).Data, olga))
	waitEvents(t, out, id, "COMPLAINED", 1)
	waitCount(t, memBox{srv}, "Processed", 1)

	again := sendTo(t, smtpAddr, []string{olga}, news, "April\r\n")
	held(t, rl, again, string(backends.ReasonComplaint), out)
	receipt := sendTo(t, smtpAddr, []string{olga}, "", "your receipt\r\n")
	waitStatus(t, rl.client, receipt, "SENT-ACKNOWLEDGED")
	if got := receivedByUpstream(t, up, receipt); got.To[0] != olga {
		t.Errorf("the transactional message reached the upstream for %v", got.To)
	}

	rl.stop()
	store, err := bolt.Open(filepath.Join(cfg.DataDir, "outbox.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	entries, err := store.SuppressionsOf(context.Background(), olga)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Scope != "news" || entries[0].Reason != backends.ReasonComplaint || entries[0].MessageID != id {
		t.Errorf("entries of %s: %+v, want one complaint for news, of %s", olga, entries, id)
	}
}

// TestTwoRelaysShareSuppressions: relays sharing an outbox share its list.
// An entry added while both run holds back the other relay's first
// message after the add returns, as each check reads the store; and a hard
// verdict one relay meets at RCPT holds the other's mail back.
func TestTwoRelaysShareSuppressions(t *testing.T) {
	for _, tc := range []struct {
		driver string
		outbox func(*testing.T) (func(*relay.Config), backends.Suppressions)
	}{
		{"mysql", func(t *testing.T) (func(*relay.Config), backends.Suppressions) {
			dsn := mysqlOutbox(t)
			s, err := mysql.Open(context.Background(), dsn, mysql.Options{MaxConns: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return func(c *relay.Config) { c.Outbox.Backend, c.Outbox.MySQL.DSN = "mysql", dsn }, s
		}},
		{"postgres", func(t *testing.T) (func(*relay.Config), backends.Suppressions) {
			dsn := pgtest.Migrated(t)
			s, err := postgres.Open(context.Background(), dsn, postgres.Options{MaxConns: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return func(c *relay.Config) { c.Outbox.Backend, c.Outbox.Postgres.DSN = "postgres", dsn }, s
		}},
	} {
		t.Run(tc.driver, func(t *testing.T) {
			outbox, store := tc.outbox(t)
			relays := make([]*running, 2)
			var outs [2]string
			for i, host := range []string{"relay-a.test", "relay-b.test"} {
				cfg, up := testConfig(t)
				pickyUpstream(up)
				outs[i] = testPlugin(t, &cfg, "ok", nil)
				outbox(&cfg)
				cfg.Hostname, cfg.Spool.Store = host, relay.SpoolOutbox
				relays[i] = start(t, cfg)
			}
			a, b := relays[0], relays[1]
			const addr = "jane@example.net"
			// Before the add, B sends to the address.
			waitStatus(t, b.client, sendTo(t, b.r.SMTPAddr().String(), []string{addr}, "", "before\r\n"), "SENT-ACKNOWLEDGED")

			ctx := context.Background()
			c := backends.SuppressionChange{Entry: backends.Suppression{Address: addr, Reason: backends.ReasonManual, Created: time.Now().UTC()},
				By: "operator test"}
			if err := c.Check(); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Suppress(ctx, c); err != nil {
				t.Fatal(err)
			}
			added := time.Now()
			id := sendTo(t, b.r.SMTPAddr().String(), []string{addr}, "", "after\r\n")
			held(t, b, id, string(backends.ReasonManual), outs[:]...)
			t.Logf("%s: relay B's first message after the add was SUPPRESSED-ACKNOWLEDGED %v after the add returned", tc.driver, time.Since(added).Round(time.Millisecond))

			// A meets a hard verdict at RCPT; B's next message is held.
			const nobody = "nobody@example.net"
			refused := sendTo(t, a.r.SMTPAddr().String(), []string{nobody}, "", "x\r\n")
			waitStatus(t, a.client, refused, "FAILED-ACKNOWLEDGED")
			if e := waitSuppressed(t, store, nobody, backends.ScopeAll); e.Reason != backends.ReasonHardBounce || e.MessageID != refused {
				t.Errorf("entry of A's verdict: %+v", e)
			}
			held(t, b, sendTo(t, b.r.SMTPAddr().String(), []string{nobody}, "", "x\r\n"), string(backends.ReasonHardBounce), outs[:]...)
		})
	}
}
