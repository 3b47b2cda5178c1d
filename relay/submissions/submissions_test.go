package submissions_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-message/mail"
	"github.com/google/uuid"

	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/internal/testrig/sqltest"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
	"github.com/genropy/postino/relay/relaytest"
	"github.com/genropy/postino/relay/submissions"
)

var drivers = []string{"postgres", "mysql"}

// app is an app's database holding a migrated submissions table, and a
// table of its own business rows.
type app struct {
	driver string
	dsn    string
	db     *sql.DB
}

func newApp(t testing.TB, driver string) *app {
	t.Helper()
	dsn := sqltest.Database(t, driver)
	ctx := context.Background()
	if err := submissions.Migrate(ctx, driver, dsn, submissions.DefaultTable); err != nil {
		t.Fatal(err)
	}
	// A second time changes nothing.
	if err := submissions.Migrate(ctx, driver, dsn, submissions.DefaultTable); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	return openApp(t, driver, dsn)
}

// openApp is the app of the database at dsn, whose submissions table
// exists: it makes its table of memos.
func openApp(t testing.TB, driver, dsn string) *app {
	t.Helper()
	sqlDriver := map[string]string{"postgres": "pgx", "mysql": "mysql"}[driver]
	db, err := sql.Open(sqlDriver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := db.Exec("CREATE TABLE memos (id VARCHAR(36) PRIMARY KEY, title VARCHAR(200) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return &app{driver: driver, dsn: dsn, db: db}
}

// submission is one row an app inserts; a nil Message is the parts form.
type submission struct {
	ID, From    string
	To          []string
	Message     []byte
	Subject     string
	Text, HTML  string
	Headers     map[string]string
	Attachments []map[string]string
	Priority    int
	Batch       string
}

// insert writes a memo and its submission in tx.
func (a *app) insert(t testing.TB, tx *sql.Tx, s submission) error {
	ph := func(n int) string {
		if a.driver == "postgres" {
			return fmt.Sprintf("$%d", n)
		}
		return "?"
	}
	if _, err := tx.Exec("INSERT INTO memos (id, title) VALUES ("+ph(1)+", "+ph(2)+")", s.ID, "memo "+s.ID); err != nil {
		return err
	}
	var to any = s.To
	if a.driver == "mysql" {
		b, _ := json.Marshal(s.To)
		to = string(b)
	}
	null := func(v string) any {
		if v == "" {
			return nil
		}
		return v
	}
	jsonOrNull := func(v any, empty bool) any {
		if empty {
			return nil
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	var msg any
	if s.Message != nil {
		msg = s.Message
	}
	if s.Priority == 0 {
		s.Priority = 2
	}
	cols := "id, mail_from, rcpt_to, message, subject, text_body, html_body, headers, attachments, priority, batch_code"
	vals := make([]string, 11)
	for i := range vals {
		vals[i] = ph(i + 1)
	}
	_, err := tx.Exec("INSERT INTO postino_submissions ("+cols+") VALUES ("+strings.Join(vals, ", ")+")",
		s.ID, s.From, to, msg, null(s.Subject), null(s.Text), null(s.HTML),
		jsonOrNull(s.Headers, s.Headers == nil), jsonOrNull(s.Attachments, s.Attachments == nil), s.Priority, null(s.Batch))
	return err
}

// commit inserts the submissions with their memos in one transaction.
func (a *app) commit(t testing.TB, subs ...submission) {
	t.Helper()
	tx, err := a.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subs {
		if err := a.insert(t, tx, s); err != nil {
			tx.Rollback()
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func (a *app) count(t testing.TB, table string) int {
	t.Helper()
	var n int
	if err := a.db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// startRelay runs a relay reading the app's table and delivering to a
// test upstream.
func startRelay(t testing.TB, a *app, up *smtptest.Server) *admin.Client {
	t.Helper()
	_, c := startRelayPoll(t, a, up, 100*time.Millisecond)
	return c
}

// startRelayPoll is startRelay reading the table every poll, and
// returns the relay's SMTP address too.
func startRelayPoll(t testing.TB, a *app, up *smtptest.Server, poll time.Duration) (string, *admin.Client) {
	t.Helper()
	r, _ := relaytest.Start(t, relayConfig(t, a.driver, a.dsn, up, poll))
	return r.SMTPAddr().String(), &admin.Client{Base: r.AdminAddr().String()}
}

// relayConfig is a relay's configuration for reading the table of driver
// at dsn every poll, and delivering to up.
func relayConfig(t testing.TB, driver, dsn string, up *smtptest.Server, poll time.Duration) relay.Config {
	cfg := relay.DefaultConfig()
	cfg.Routes.Default.Smarthost = up.Addr
	cfg.DataDir = t.TempDir()
	cfg.Hostname = "relay.test"
	cfg.SMTP.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Intake.Poll = relay.Duration(50 * time.Millisecond)
	cfg.Delivery.Poll = relay.Duration(50 * time.Millisecond)
	cfg.Submissions = []relay.SubmissionsConfig{{Driver: driver, DSN: dsn, Poll: relay.Duration(poll)}}
	return cfg
}

func waitFor(t testing.TB, d time.Duration, what func() string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s: %s", d, what())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// delivered counts the upstream's messages by X-Genro-Mail-ID.
func delivered(up *smtptest.Server) map[string]int {
	out := map[string]int{}
	for _, m := range up.Messages() {
		out[m.Header("X-Genro-Mail-ID")]++
	}
	return out
}

// status waits until the message id is in one of the statuses, and
// returns it.
func status(t *testing.T, c *admin.Client, id string, want ...string) admin.Message {
	t.Helper()
	var m admin.Message
	var err error
	waitFor(t, time.Minute, func() string { return fmt.Sprintf("message %s is %q (%v); want %v", id, m.Status, err, want) }, func() bool {
		m, err = c.Get(context.Background(), id)
		for _, w := range want {
			if err == nil && m.Status == w {
				return true
			}
		}
		return false
	})
	return m
}

// allTaken waits for the submissions table to be empty: a batch's delete
// commits once the outbox holds its messages, so a message may be
// delivered before its row is gone.
func allTaken(t *testing.T, a *app) {
	t.Helper()
	n := -1
	waitFor(t, time.Minute, func() string { return fmt.Sprintf("%d submissions left; want none", n) }, func() bool {
		n = a.count(t, "postino_submissions")
		return n == 0
	})
}

func plain(id string) []byte {
	return []byte("From: App <app@example.com>\r\nTo: user@example.net\r\nSubject: memo " + id + "\r\n\r\nA memo was created.\r\n")
}

// forEachDriver runs test on each database, with an app's database, a test
// upstream, and a relay reading the app's table and delivering there.
func forEachDriver(t *testing.T, test func(t *testing.T, a *app, up *smtptest.Server, c *admin.Client)) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			a := newApp(t, driver)
			up := smtptest.Start(t, smtptest.Options{})
			test(t, a, up, startRelay(t, a, up))
		})
	}
}

// TestCommit: the submission an app's transaction commits with its memo
// is delivered once, and leaves the table.
func TestCommit(t *testing.T) {
	forEachDriver(t, func(t *testing.T, a *app, up *smtptest.Server, c *admin.Client) {
		a.commit(t, submission{ID: "memo-1", From: "app@example.com", To: []string{"user@example.net"}, Message: plain("memo-1"),
			Priority: 1, Batch: "memos"})
		m := status(t, c, "memo-1", "SENT-ACKNOWLEDGED")
		if m.Priority != 1 || m.Batch != "memos" {
			t.Errorf("priority %d, batch %q; want the columns' 1 and memos", m.Priority, m.Batch)
		}
		if got := delivered(up); got["memo-1"] != 1 || len(got) != 1 {
			t.Errorf("delivered %v; want memo-1 once", got)
		}
		allTaken(t, a)
		if n := a.count(t, "memos"); n != 1 {
			t.Errorf("%d memos; want the one committed", n)
		}
	})
}

// metrics reads the relay's /metrics.
func metrics(t *testing.T, c *admin.Client) string {
	t.Helper()
	resp, err := http.Get("http://" + c.Base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestRollback: a submission rolled back with its memo is never seen; the
// one committed after it is delivered alone.
func TestRollback(t *testing.T) {
	forEachDriver(t, func(t *testing.T, a *app, up *smtptest.Server, c *admin.Client) {
		tx, err := a.db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if err := a.insert(t, tx, submission{ID: "rolled-back", From: "app@example.com", To: []string{"user@example.net"}, Message: plain("rolled-back")}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		a.commit(t, submission{ID: "after", From: "app@example.com", To: []string{"user@example.net"}, Message: plain("after")})
		status(t, c, "after", "SENT-ACKNOWLEDGED")
		if got := delivered(up); len(got) != 1 || got["after"] != 1 {
			t.Errorf("delivered %v; want only the committed message", got)
		}
		if _, err := c.Get(context.Background(), "rolled-back"); err == nil {
			t.Error("the outbox holds the rolled-back submission")
		}
	})
}

// TestParts: a submission given as parts becomes a MIME message:
// multipart/mixed around multipart/alternative and the attachment, with
// the subject, extra headers, From, To, Date and Message-ID.
func TestParts(t *testing.T) {
	forEachDriver(t, func(t *testing.T, a *app, up *smtptest.Server, c *admin.Client) {
		pdf := []byte("%PDF-1.4 not really\x00\xff")
		a.commit(t, submission{ID: "parts-1", From: "app@example.com", To: []string{"user@example.net", "other@example.org"},
			Subject: "Memo créé", Text: "Un mémo.\n", HTML: "<p>Un <b>mémo</b>.</p>",
			Headers:     map[string]string{"Reply-To": "desk@example.com", "X-App": "memo"},
			Attachments: []map[string]string{{"filename": "memo.pdf", "content_type": "application/pdf", "content": base64.StdEncoding.EncodeToString(pdf)}}})
		status(t, c, "parts-1", "SENT-ACKNOWLEDGED")
		msgs := up.Messages()
		if len(msgs) != 1 {
			t.Fatalf("%d messages delivered; want 1", len(msgs))
		}
		checkParts(t, msgs[0].Data, pdf)

		// Text alone is one text/plain part.
		a.commit(t, submission{ID: "parts-2", From: "app@example.com", To: []string{"user@example.net"}, Subject: "Short", Text: "Just text."})
		status(t, c, "parts-2", "SENT-ACKNOWLEDGED")
		for _, m := range up.Messages() {
			if m.Header("X-Genro-Mail-ID") != "parts-2" {
				continue
			}
			r, err := mail.CreateReader(bytes.NewReader(m.Data))
			if err != nil {
				t.Fatal(err)
			}
			if ct, _, _ := r.Header.ContentType(); ct != "text/plain" {
				t.Errorf("text alone is %s; want text/plain", ct)
			}
		}
	})
}

// TestPartsAddressNames: address fields with names beyond ASCII (umlauts,
// emoji, quotes, commas, several mailboxes) reach the recipient as
// address lists that go-message and Python's email package read back with
// the names and addresses the app gave.
func TestPartsAddressNames(t *testing.T) {
	forEachDriver(t, func(t *testing.T, a *app, up *smtptest.Server, c *admin.Client) {
		headers := map[string]string{}
		for _, tc := range submissions.AddressCases {
			headers[tc.Field] = tc.Value
		}
		a.commit(t, submission{ID: "names-1", From: "shop@example.com", To: []string{"juergen@example.net"},
			Subject: "Grüße", Text: "Hallo.", Headers: headers})
		status(t, c, "names-1", "SENT-ACKNOWLEDGED")
		msgs := up.Messages()
		if len(msgs) != 1 {
			t.Fatalf("%d messages delivered; want 1", len(msgs))
		}
		r, err := mail.CreateReader(bytes.NewReader(msgs[0].Data))
		if err != nil {
			t.Fatal(err)
		}
		python := submissions.PythonAddresses(t, msgs[0].Data)
		for _, tc := range submissions.AddressCases {
			list, err := r.Header.AddressList(tc.Field)
			var got []string
			for _, a := range list {
				got = append(got, a.Name+" <"+a.Address+">")
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.Want) {
				t.Errorf("%s delivered as %q: go-message reads %q (%v); want %q", tc.Field, r.Header.Get(tc.Field), got, err, tc.Want)
			}
			if py := python[strings.ToLower(tc.Field)]; fmt.Sprint(py) != fmt.Sprint(tc.Want) {
				t.Errorf("%s delivered as %q: Python reads %q; want %q", tc.Field, r.Header.Get(tc.Field), py, tc.Want)
			}
		}
	})
}

func checkParts(t *testing.T, data, pdf []byte) {
	t.Helper()
	r, err := mail.CreateReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	h := r.Header
	if s, _ := h.Subject(); s != "Memo créé" {
		t.Errorf("Subject %q", s)
	}
	if from, _ := h.AddressList("From"); len(from) != 1 || from[0].Address != "app@example.com" {
		t.Errorf("From %v", from)
	}
	if to, _ := h.AddressList("To"); len(to) != 2 {
		t.Errorf("To %v; want both recipients", to)
	}
	if d, err := h.Date(); err != nil || d.IsZero() {
		t.Errorf("Date: %v", err)
	}
	if id, err := h.MessageID(); err != nil || id == "" {
		t.Errorf("Message-ID %q: %v", id, err)
	}
	if h.Get("Reply-To") != "desk@example.com" || h.Get("X-App") != "memo" {
		t.Errorf("extra headers: Reply-To %q, X-App %q", h.Get("Reply-To"), h.Get("X-App"))
	}
	if ct, _, _ := h.ContentType(); ct != "multipart/mixed" {
		t.Errorf("Content-Type %s; want multipart/mixed", ct)
	}
	var texts []string
	var attached []byte
	for {
		p, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p.Body)
		switch ph := p.Header.(type) {
		case *mail.InlineHeader:
			ct, _, _ := ph.ContentType()
			texts = append(texts, ct+": "+string(b))
		case *mail.AttachmentHeader:
			if name, _ := ph.Filename(); name != "memo.pdf" {
				t.Errorf("attachment named %q", name)
			}
			attached = b
		}
	}
	if want := []string{"text/plain: Un mémo.\r\n", "text/html: <p>Un <b>mémo</b>.</p>"}; fmt.Sprint(texts) != fmt.Sprint(want) {
		t.Errorf("texts %q; want %q", texts, want)
	}
	if !bytes.Equal(attached, pdf) {
		t.Errorf("attachment %q; want %q", attached, pdf)
	}
}

// TestInvalid: a submission that fails the checks becomes an INVALID
// message with its reason and an INVALID event, and leaves the table.
func TestInvalid(t *testing.T) {
	forEachDriver(t, func(t *testing.T, a *app, up *smtptest.Server, c *admin.Client) {
		cases := []struct {
			sub    submission
			reason string
		}{
			{submission{ID: "no-from", From: "app@example.com", To: []string{"user@example.net"},
				Message: []byte("Subject: none\r\n\r\nbody\r\n")}, "no From header"},
			{submission{ID: "bad-base64", From: "app@example.com", To: []string{"user@example.net"}, Text: "x",
				Attachments: []map[string]string{{"filename": "a.bin", "content": "!!!"}}}, "not base64"},
			{submission{ID: "bad-batch", From: "app@example.com", To: []string{"user@example.net"}, Message: plain("bad-batch"),
				Batch: "no spaces"}, "batch code"},
			{submission{ID: "bad-rcpt", From: "app@example.com", To: []string{"not an address"}, Message: plain("bad-rcpt")}, "address"},
			{submission{ID: "no-body", From: "app@example.com", To: []string{"user@example.net"}}, "no message"},
			{submission{ID: "control-twice", From: "app@example.com", To: []string{"user@example.net"},
				Message: append([]byte("X-Postino-Priority: 1\r\n"), plain("control-twice")...)}, "X-Postino-Priority, which the submission sets"},
			{submission{ID: "other-id", From: "app@example.com", To: []string{"user@example.net"},
				Message: append([]byte("X-Genro-Mail-ID: another\r\n"), plain("other-id")...)}, "not the submission's id"},
		}
		for _, tc := range cases {
			a.commit(t, tc.sub)
		}
		for _, tc := range cases {
			m := status(t, c, tc.sub.ID, "INVALID-ACKNOWLEDGED")
			if !strings.Contains(m.Reason, tc.reason) {
				t.Errorf("%s: reason %q; want it to say %q", tc.sub.ID, m.Reason, tc.reason)
			}
			if len(m.Events) == 0 || m.Events[0].Outcome != "INVALID" {
				t.Errorf("%s: events %+v; want an INVALID event", tc.sub.ID, m.Events)
			}
		}
		allTaken(t, a)
		if n := len(up.Messages()); n != 0 {
			t.Errorf("%d messages delivered; want none", n)
		}
		want := fmt.Sprintf(`postino_submissions_taken_total{result="refused",table="%s:postino_submissions"} %d`, a.driver, len(cases))
		if m := metrics(t, c); !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	})
}

// TestRefusedID: a submission whose id is no message id is refused under
// an id derived from it, the same whichever time it is recorded, so that
// a refusal recorded again (its transaction failed) is one message.
func TestRefusedID(t *testing.T) {
	forEachDriver(t, func(t *testing.T, a *app, _ *smtptest.Server, c *admin.Client) {
		a.commit(t, submission{ID: "not an id", From: "app@example.com", To: []string{"user@example.net"}, Message: plain("not an id")})
		id := uuid.NewSHA1(uuid.NameSpaceOID, []byte("postino submission not an id")).String()
		m := status(t, c, id, "INVALID-ACKNOWLEDGED")
		if !strings.Contains(m.Reason, `submission "not an id"`) {
			t.Errorf("reason %q; want it to name the submission", m.Reason)
		}
	})
}

// TestConcurrentApps: 10,000 submissions committed by 8 concurrent app
// writers, read by two relays with outboxes of their own, are each
// delivered once: SKIP LOCKED gives a row to one relay, and the delete
// in the claim's transaction keeps the other from taking it later.
func TestConcurrentApps(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 messages")
	}
	forEachDriver(t, func(t *testing.T, a *app, up *smtptest.Server, _ *admin.Client) {
		startRelay(t, a, up)
		const writers, perTx, txs = 8, 125, 10
		total := writers * perTx * txs
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for x := range txs {
					subs := make([]submission, perTx)
					for i := range subs {
						id := fmt.Sprintf("c-%d-%02d-%03d", w, x, i)
						subs[i] = submission{ID: id, From: "app@example.com", To: []string{"user@example.net"}, Message: plain(id)}
					}
					a.commit(t, subs...)
				}
			})
		}
		wg.Wait()
		waitFor(t, 5*time.Minute, func() string { return fmt.Sprintf("%d of %d delivered", len(up.Messages()), total) },
			func() bool { return len(up.Messages()) >= total })
		got := delivered(up)
		if len(got) != total {
			t.Errorf("%d distinct ids delivered; want %d", len(got), total)
		}
		for id, n := range got {
			if n != 1 {
				t.Errorf("%s delivered %d times", id, n)
			}
		}
		allTaken(t, a)
	})
}

// TestSendAfter: send_after holds the message in READY until then, as
// X-Postino-Send-After does (on MySQL, a DATETIME in UTC).
func TestSendAfter(t *testing.T) {
	forEachDriver(t, func(t *testing.T, a *app, up *smtptest.Server, c *admin.Client) {
		q := `INSERT INTO postino_submissions (id, mail_from, rcpt_to, message, send_after)
VALUES ('later', 'app@example.com', ARRAY['user@example.net'], $1, now() + interval '1 hour')`
		if a.driver == "mysql" {
			q = `INSERT INTO postino_submissions (id, mail_from, rcpt_to, message, send_after)
VALUES ('later', 'app@example.com', '["user@example.net"]', ?, UTC_TIMESTAMP() + INTERVAL 1 HOUR)`
		}
		if _, err := a.db.Exec(q, plain("later")); err != nil {
			t.Fatal(err)
		}
		m := status(t, c, "later", "READY")
		if d := time.Until(m.DueAt); d < 59*time.Minute || d > 61*time.Minute {
			t.Errorf("due at %s, in %s; want in an hour", m.DueAt, d)
		}
	})
}

// TestDegraded: while the table cannot be read the relay says so in
// /readyz (degraded: it still takes SMTP mail), and it reads the table
// again once it is back.
func TestDegraded(t *testing.T) {
	forEachDriver(t, func(t *testing.T, a *app, up *smtptest.Server, c *admin.Client) {
		if _, err := a.db.Exec("DROP TABLE postino_submissions"); err != nil {
			t.Fatal(err)
		}
		check := "submissions " + a.driver + ":postino_submissions"
		var r admin.Readiness
		waitFor(t, time.Minute, func() string { return fmt.Sprintf("readiness %+v; want %s failing", r, check) }, func() bool {
			r, _ = c.Ready(context.Background())
			return r.Status == "degraded" && strings.Contains(r.Checks[check], "postino_submissions")
		})
		if err := submissions.Migrate(context.Background(), a.driver, a.dsn, submissions.DefaultTable); err != nil {
			t.Fatal(err)
		}
		a.commit(t, submission{ID: "back", From: "app@example.com", To: []string{"user@example.net"}, Message: plain("back")})
		status(t, c, "back", "SENT-ACKNOWLEDGED")
		waitFor(t, time.Minute, func() string { return fmt.Sprintf("readiness %+v; want %s ok", r, check) }, func() bool {
			r, _ = c.Ready(context.Background())
			return r.Checks[check] == "ok"
		})
	})
}
