package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/testrig/logtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/internal/testrig/testcert"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
	"github.com/genropy/postino/relay/relaytest"
	"github.com/genropy/postino/spool"
)

// testConfig is a relay on free ports, delivering to a test upstream.
func testConfig(t *testing.T) (relay.Config, *smtptest.Server) {
	up := smtptest.Start(t, smtptest.Options{})
	cfg := relay.DefaultConfig()
	cfg.Routes.Default.Smarthost = up.Addr
	cfg.DataDir = t.TempDir()
	cfg.Hostname = "relay.test"
	cfg.SMTP.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Intake.Poll = relay.Duration(50 * time.Millisecond)
	cfg.Delivery.Poll = relay.Duration(50 * time.Millisecond)
	return cfg, up
}

type running struct {
	r      *relay.Relay
	client *admin.Client
	stop   func()
}

func start(t *testing.T, cfg relay.Config) *running {
	t.Helper()
	r, stop := relaytest.Start(t, cfg)
	return newRunning(t, r, stop)
}

// startLogging is start with the relay's log kept for the test to read.
func startLogging(t *testing.T, cfg relay.Config) (*running, *logtest.Buffer) {
	t.Helper()
	log, logs := logtest.Logger()
	r, stop := relaytest.StartLog(t, cfg, log)
	return newRunning(t, r, stop), logs
}

func newRunning(t *testing.T, r *relay.Relay, stop func() error) *running {
	return &running{r: r, client: &admin.Client{Base: r.AdminAddr().String()}, stop: func() {
		if err := stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}}
}

func send(t *testing.T, addr string, header string) string {
	t.Helper()
	c, err := smtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Hello("app.local"); err != nil {
		t.Fatal(err)
	}
	if err := c.Mail("app@example.com", nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt("user@example.net", nil); err != nil {
		t.Fatal(err)
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(w, "From: app@example.com\r\nTo: user@example.net\r\n%sSubject: test\r\n\r\nbody\r\n", header)
	resp, err := w.CloseWithResponse()
	if err != nil {
		t.Fatal(err)
	}
	id, ok := strings.CutPrefix(resp.StatusText, "2.0.0 Ok: queued as ")
	if !ok {
		t.Fatalf("reply %+v", resp)
	}
	return id
}

func waitStatus(t *testing.T, c *admin.Client, id string, want string) admin.Message {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		m, err := c.Get(context.Background(), id)
		if err == nil && m.Status == want {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %s (%v), want %s", id, m.Status, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func statuses(m admin.Message) string {
	var out []string
	for _, h := range m.History {
		out = append(out, h.Status)
	}
	return strings.Join(out, " ")
}

func TestEndToEndAdmin(t *testing.T) {
	cfg, up := testConfig(t)
	rl := start(t, cfg)
	ctx := context.Background()
	smtpAddr := rl.r.SMTPAddr().String()

	id := send(t, smtpAddr, "X-Postino-Priority: 1\r\n")
	m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	// Intake prepares the message it accepted straight from ACCEPTED,
	// unless its poll (50 ms here) claimed it first.
	if got := statuses(m); got != "ACCEPTED READY PROCESSING SENT CALLING-SENT-CALLBACK SENT-ACKNOWLEDGED" &&
		got != "ACCEPTED INTAKING READY PROCESSING SENT CALLING-SENT-CALLBACK SENT-ACKNOWLEDGED" {
		t.Errorf("history %s", got)
	}
	if m.Priority != 1 || m.Attempts != 1 || m.Recipients[0].Address != "user@example.net" || m.Recipients[0].Status != "sent" {
		t.Errorf("message %+v", m)
	}
	if len(m.Events) != 1 || m.Events[0].Outcome != "SENT" || m.Events[0].State != "acked" || m.Events[0].ID == "" {
		t.Errorf("events %+v", m.Events)
	}
	got := up.Messages()
	if len(got) != 1 || got[0].Header("X-Genro-Mail-ID") != id || got[0].Header("X-Postino-Priority") != "" {
		t.Fatalf("upstream received %+v", got)
	}

	due := "X-Postino-Send-After: " + time.Now().Add(time.Hour).UTC().Format(time.RFC3339) + "\r\n"
	later := send(t, smtpAddr, "X-Genro-Mail-ID: later-1\r\nX-Postino-Batch: promo\r\n"+due)
	other := send(t, smtpAddr, "X-Genro-Mail-ID: later-2\r\n"+due)
	waitStatus(t, rl.client, later, "READY")
	waitStatus(t, rl.client, other, "READY")

	page, err := rl.client.List(ctx, admin.ListFilter{Status: "ready", Limit: 10})
	if err != nil || len(page.Messages) != 2 {
		t.Fatalf("list READY: %+v, %v", page, err)
	}
	if p, err := rl.client.List(ctx, admin.ListFilter{Limit: 1}); err != nil || len(p.Messages) != 1 || p.Next == "" {
		t.Errorf("a page of one: %+v, %v", p, err)
	} else if p2, err := rl.client.List(ctx, admin.ListFilter{Limit: 1, After: p.Next}); err != nil || len(p2.Messages) != 1 || p2.Messages[0].ID == p.Messages[0].ID {
		t.Errorf("second page: %+v, %v", p2, err)
	}
	if _, err := rl.client.List(ctx, admin.ListFilter{Status: "LOST", Limit: 10}); err == nil || !strings.Contains(err.Error(), "unknown status") {
		t.Errorf("bad status filter: %v", err)
	}

	// A suspended batch is not delivered, even when due: the message is
	// checked once the cancelled message below, due after it, has been
	// claimed and sent.
	if err := rl.client.SuspendBatch(ctx, "promo"); err != nil {
		t.Fatal(err)
	}
	if r, err := rl.client.Retry(ctx, later, false); err != nil || r.Status != "READY" || r.DueAt.After(time.Now()) {
		t.Errorf("retry: %+v, %v", r, err)
	}

	// Cancel: READY ends FAILED, told to the callbacks; it can be retried.
	c, err := rl.client.Cancel(ctx, other)
	if err != nil || c.Status != "FAILED" || !strings.Contains(c.Reason, "cancelled") {
		t.Errorf("cancel: %+v, %v", c, err)
	}
	if m := waitStatus(t, rl.client, other, "FAILED-ACKNOWLEDGED"); len(m.Events) != 1 || m.Events[0].Outcome != "FAILED" || m.Events[0].State != "acked" {
		t.Errorf("events of the cancelled message %+v", m.Events)
	}
	if _, err := rl.client.Cancel(ctx, other); err == nil || !strings.Contains(err.Error(), "cannot cancel") {
		t.Errorf("second cancel: %v", err)
	}
	// The reply reads the message back after its move, which the delivery
	// engine may have claimed by then. Now: it was cancelled while it
	// waited for its X-Postino-Send-After, an hour ahead.
	if r, err := rl.client.Retry(ctx, other, true); err != nil || !slices.Contains([]string{"READY", "PROCESSING", "SENT", "SENT-ACKNOWLEDGED"}, r.Status) {
		t.Errorf("retry of a failed message: %+v, %v", r, err)
	}
	waitStatus(t, rl.client, other, "SENT-ACKNOWLEDGED")
	// The claim that took other found later due too.
	if m, _ := rl.client.Get(ctx, later); m.Status != "READY" {
		t.Errorf("a message of a suspended batch went on: %s", m.Status)
	}
	if err := rl.client.ActivateBatch(ctx, "promo"); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, rl.client, later, "SENT-ACKNOWLEDGED")
	if err := rl.client.SuspendBatch(ctx, "bad code"); err == nil {
		t.Error("an invalid batch code was accepted")
	}
	if _, err := rl.client.Get(ctx, "nope"); !admin.IsNotFound(err) {
		t.Errorf("unknown id: %v", err)
	}

	base := "http://" + rl.r.AdminAddr().String()
	for _, path := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(base + path)
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("%s: %v %v", path, resp, err)
		}
	}
	body := scrape(t, rl)
	for _, want := range []string{"postino_intake_accepted_total 3", `postino_queue_messages{status="SENT-ACKNOWLEDGED"} 3`,
		"postino_intake_accept_seconds_bucket", `postino_delivery_delivered_total{route="default"} 3`,
		"postino_delivery_latency_seconds_bucket", "postino_delivery_connections"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestRejectedCounted(t *testing.T) {
	cfg, _ := testConfig(t)
	rl := start(t, cfg)
	c, err := smtp.Dial(rl.r.SMTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.SendMail("a@example.com", []string{"b@example.net"}, strings.NewReader("Subject: no from\r\n\r\nx\r\n"))
	var se *smtp.SMTPError
	if !errors.As(err, &se) || se.Code != 554 {
		t.Fatalf("send without From: %v", err)
	}
	if body := scrape(t, rl); !strings.Contains(body, `postino_intake_rejected_total{reason="content"} 1`) {
		t.Errorf("rejection not counted:\n%s", grep(body, "rejected"))
	}
}

// scrape returns the relay's /metrics page.
func scrape(t *testing.T, rl *running) string {
	t.Helper()
	return adminGet(t, rl, "/metrics")
}

// scrapeUntil returns the relay's /metrics page once it holds line.
func scrapeUntil(t *testing.T, rl *running, line string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		body := scrape(t, rl)
		if strings.Contains(body, line) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics lacks %s:\n%s", line, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// adminGet returns the body of an admin API page.
func adminGet(t *testing.T, rl *running, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + rl.r.AdminAddr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// seed opens the data directory as the relay would and lets the test put
// rows and files in it before the relay starts.
func seed(t *testing.T, cfg relay.Config, fn func(*bolt.Store, *spool.Spool)) {
	t.Helper()
	sp, err := spool.Open(filepath.Join(cfg.DataDir, "spool"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := bolt.Open(filepath.Join(cfg.DataDir, "outbox.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	fn(store, sp)
	store.Close()
	sp.Close()
}

func spoolFile(t *testing.T, sp *spool.Spool, id string, at time.Time) string {
	t.Helper()
	f, err := sp.Create(id, at)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(f, "From: a@example.com\r\nSubject: seeded\r\n\r\nbody\r\n")
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	return f.Path()
}

func TestStartupRecovery(t *testing.T) {
	cfg, _ := testConfig(t)
	var orphan, stale string
	const lostPath = "20260101/0000/lost-file.000000000000.eml"
	seed(t, cfg, func(store *bolt.Store, sp *spool.Spool) {
		// A crash after the file was written, before the row: no 250 was given.
		orphan = spoolFile(t, sp, "never-acked", time.Now())
		// A row whose file this relay cannot see (a volume not mounted, say).
		create(t, store, "lost-file", lostPath, backends.StatusReady)
		// A message the dead process was preparing, its lease not yet expired.
		create(t, store, "interrupted", spoolFile(t, sp, "interrupted", time.Now()), backends.StatusIntaking)
		// A file of an id whose row points at another file (the race of two
		// submissions of one X-Genro-Mail-ID, cut by a crash).
		stale = spoolFile(t, sp, "interrupted", time.Now())
	})
	rl := start(t, cfg)
	sp, _ := spool.Open(filepath.Join(cfg.DataDir, "spool"))
	defer sp.Close()
	// The sweep runs in the background, mail flowing meanwhile.
	for _, p := range []string{orphan, stale} {
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if ok, _ := sp.Exists(p); !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("orphan spool file %s survived the start", p)
			}
		}
	}
	m := waitStatus(t, rl.client, "interrupted", "SENT-ACKNOWLEDGED")
	if ok, _ := sp.Exists(m.EmlPath); !ok {
		t.Errorf("the interrupted message lost its file")
	}

	// The message whose file cannot be read waits, and says so; the relay
	// is degraded, and counts it.
	m = waitMessage(t, rl.client, "lost-file", func(m admin.Message) bool { return m.Attempts > 0 })
	if m.Status != "READY" || !strings.Contains(m.Reason, "cannot be read") || !strings.Contains(m.Reason, "lost-file") {
		t.Errorf("a message whose file cannot be read: %s %q, want READY saying so", m.Status, m.Reason)
	}
	if ready, err := rl.client.Ready(context.Background()); err != nil || ready.Status != "degraded" || !strings.Contains(ready.Checks["message files"], lostPath) {
		t.Errorf("readiness %+v, %v: want degraded naming the file", ready, err)
	}
	scrapeUntil(t, rl, "postino_spool_unreadable_total 1")
	// Once the file is back, the message is sent.
	if err := os.MkdirAll(filepath.Join(cfg.DataDir, "spool", filepath.Dir(lostPath)), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "spool", lostPath), []byte("From: a@example.com\r\nSubject: back\r\n\r\nbody\r\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := rl.client.Retry(context.Background(), "lost-file", false); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, rl.client, "lost-file", "SENT-ACKNOWLEDGED")
}

// create puts a message in the store and walks it to status.
func create(t *testing.T, store *bolt.Store, id, path string, status backends.Status) {
	t.Helper()
	ctx := context.Background()
	m := &backends.Message{ID: id, EmlPath: path, Priority: 2, Envelope: backends.Envelope{Sender: "a@example.com", Recipients: []string{"b@example.net"}}}
	if err := store.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	steps := map[backends.Status][]backends.Status{
		backends.StatusAccepted:         nil,
		backends.StatusIntaking:         {backends.StatusIntaking},
		backends.StatusReady:            {backends.StatusIntaking, backends.StatusReady},
		backends.StatusSentAcknowledged: {backends.StatusIntaking, backends.StatusReady, backends.StatusProcessing, backends.StatusSent, backends.StatusCallingSent, backends.StatusSentAcknowledged},
	}[status]
	from := backends.StatusAccepted
	for _, to := range steps {
		tr := backends.Transition{ID: id, From: from, To: to, Reason: "seeded"}
		if to.Working() {
			tr.LeaseUntil = time.Now().Add(time.Hour)
		}
		if err := store.Transition(ctx, tr); err != nil {
			t.Fatal(err)
		}
		from = to
	}
}

func TestRetention(t *testing.T) {
	cfg, _ := testConfig(t)
	cfg.Retention = relay.Duration(time.Hour)
	var oldPath, youngPath string
	seed(t, cfg, func(store *bolt.Store, sp *spool.Spool) {
		oldPath = spoolFile(t, sp, "old", time.Now())
		create(t, store, "old", oldPath, backends.StatusAccepted)
		// Acknowledged two hours ago.
		steps := []backends.Status{backends.StatusIntaking, backends.StatusReady, backends.StatusProcessing,
			backends.StatusSent, backends.StatusCallingSent, backends.StatusSentAcknowledged}
		from := backends.StatusAccepted
		for _, to := range steps {
			tr := backends.Transition{ID: "old", From: from, To: to, At: time.Now().Add(-2 * time.Hour)}
			if to.Working() {
				tr.LeaseUntil = time.Now().Add(time.Hour)
			}
			if err := store.Transition(context.Background(), tr); err != nil {
				t.Fatal(err)
			}
			from = to
		}
		youngPath = spoolFile(t, sp, "young", time.Now())
		create(t, store, "young", youngPath, backends.StatusSentAcknowledged)
	})
	rl := start(t, cfg)
	// The row goes first, then the file: wait for both.
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := rl.client.Get(context.Background(), "old")
		_, statErr := os.Stat(filepath.Join(cfg.DataDir, "spool", oldPath))
		if admin.IsNotFound(err) && os.IsNotExist(statErr) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old acknowledged message is still there: row %v, spool file %v", err, statErr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := rl.client.Get(context.Background(), "young"); err != nil {
		t.Errorf("the young acknowledged message was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "spool", youngPath)); err != nil {
		t.Errorf("the young message's file: %v", err)
	}
}

// TestRetentionPrunesSuppressions: the housekeeping removes a suppression
// entry that expired, keeping its history, and leaves one that has not.
func TestRetentionPrunesSuppressions(t *testing.T) {
	cfg, _ := testConfig(t)
	seed(t, cfg, func(store *bolt.Store, _ *spool.Spool) {
		for addr, expires := range map[string]time.Time{"gone@example.net": time.Now().Add(-time.Hour), "kept@example.net": time.Now().Add(time.Hour)} {
			c := backends.SuppressionChange{Entry: backends.Suppression{Address: addr, Reason: backends.ReasonManual,
				Created: time.Now().Add(-2 * time.Hour), Expires: expires}, By: "operator test"}
			if err := c.Check(); err != nil {
				t.Fatal(err)
			}
			if _, err := store.Suppress(context.Background(), c); err != nil {
				t.Fatal(err)
			}
		}
	})
	rl := start(t, cfg)
	deadline := time.Now().Add(60 * time.Second)
	for {
		d, err := rl.client.Suppression(context.Background(), "gone@example.net")
		if err == nil && len(d.Entries) == 0 && len(d.History) == 2 && d.History[1].Action == backends.ActionExpired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the expired entry was not pruned: %+v, %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d, err := rl.client.Suppression(context.Background(), "kept@example.net"); err != nil || len(d.Entries) != 1 {
		t.Errorf("an entry not expired yet: %+v, %v", d, err)
	}
}

func TestReadyzReportsOutbox(t *testing.T) {
	cfg, _ := testConfig(t)
	rl := start(t, cfg)
	resp, err := http.Get("http://" + rl.r.AdminAddr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	var body struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if body.Status != "ready" || body.Checks["outbox"] != "ok" || body.Checks["spool"] != "ok" {
		t.Errorf("readyz %+v", body)
	}
}

func TestSecondRelayOnSameData(t *testing.T) {
	cfg, _ := testConfig(t)
	start(t, cfg)
	_, err := relay.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err == nil || !strings.Contains(err.Error(), "another") {
		t.Fatalf("a second relay on the same data directory: %v", err)
	}
}

func TestTLSAndAuthFromConfig(t *testing.T) {
	cert := testcert.New(t)
	t.Setenv("APP_SMTP_PASSWORD", "s3cret")
	cfg, _ := testConfig(t)
	cfg.SMTP.TLS = relay.TLSConfig{CertFile: cert.CertFile, KeyFile: cert.KeyFile}
	cfg.SMTP.Auth.Accounts = []relay.Account{{Username: "app", PasswordEnv: "APP_SMTP_PASSWORD"}}
	cfg.SMTP.AllowNetworks = []string{} // nobody is trusted without AUTH
	rl := start(t, cfg)

	c, err := smtp.DialStartTLS(rl.r.SMTPAddr().String(), cert.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Mail("app@example.com", nil); err == nil {
		t.Fatal("MAIL without AUTH was accepted")
	}
	if err := c.Auth(sasl.NewPlainClient("", "app", "s3cret")); err != nil {
		t.Fatal(err)
	}
	if err := c.SendMail("app@example.com", []string{"user@example.net"}, strings.NewReader("From: app@example.com\r\n\r\nx\r\n")); err != nil {
		t.Fatal(err)
	}
	page, err := rl.client.List(context.Background(), admin.ListFilter{Limit: 10})
	if err != nil || len(page.Messages) != 1 || page.Messages[0].AuthUser != "app" {
		t.Errorf("list %+v, %v", page, err)
	}
}

// TestRetryKeepsSendAfter cancels messages that wait for their
// X-Postino-Send-After and retries them through the admin API: one waits
// for its time again, the other, retried with now, goes at once.
// (admin's TestRetryDue has the other cases: a time passed meanwhile, a
// message tried before.)
func TestRetryKeepsSendAfter(t *testing.T) {
	cfg, up := testConfig(t)
	rl := start(t, cfg)
	ctx := context.Background()
	smtpAddr := rl.r.SMTPAddr().String()

	hour := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	for id, v := range map[string]string{
		"keeps": hour.Format(time.RFC3339),
		"now":   strconv.FormatInt(hour.Unix(), 10), // as a submissions row gives it
	} {
		send(t, smtpAddr, "X-Genro-Mail-ID: "+id+"\r\nX-Postino-Send-After: "+v+"\r\n")
		waitStatus(t, rl.client, id, "READY")
		if c, err := rl.client.Cancel(ctx, id); err != nil || c.Status != "FAILED" {
			t.Fatalf("cancel %s: %+v, %v", id, c, err)
		}
		waitStatus(t, rl.client, id, "FAILED-ACKNOWLEDGED")
	}

	r, err := rl.client.Retry(ctx, "keeps", false)
	if err != nil || r.Status != "READY" || !r.DueAt.Equal(hour) || r.Waiting != admin.WaitingScheduled ||
		!strings.Contains(r.Reason, "due at its X-Postino-Send-After, "+hour.Format(time.RFC3339)) {
		t.Errorf("retry of a cancelled scheduled message: %s due %s (%s) %q, %v; want READY due %s, scheduled",
			r.Status, r.DueAt, r.Waiting, r.Reason, err, hour)
	}
	if r, err := rl.client.Retry(ctx, "now", true); err != nil || r.DueAt.After(time.Now()) {
		t.Errorf("retry now: %s due %s, %v; want due now", r.Status, r.DueAt, err)
	}
	waitStatus(t, rl.client, "now", "SENT-ACKNOWLEDGED")
	// The claim that took "now" found "keeps" not due: it waits.
	if m, err := rl.client.Get(ctx, "keeps"); err != nil || m.Status != "READY" || m.Attempts != 0 || !m.DueAt.Equal(hour) {
		t.Errorf("the retried scheduled message: %s, %d attempts, due %s, %v", m.Status, m.Attempts, m.DueAt, err)
	}
	for _, m := range up.Messages() {
		if m.Header("X-Genro-Mail-ID") == "keeps" {
			t.Error("the retried scheduled message was delivered before its X-Postino-Send-After")
		}
	}
	// Retrying it while it waits sends it now, as for any READY message.
	if r, err := rl.client.Retry(ctx, "keeps", false); err != nil || r.DueAt.After(time.Now()) {
		t.Errorf("retry of the waiting message: %s due %s, %v; want due now", r.Status, r.DueAt, err)
	}
	waitStatus(t, rl.client, "keeps", "SENT-ACKNOWLEDGED")
	resp, err := http.Post("http://"+rl.r.AdminAddr().String()+"/v1/messages/keeps/retry?now=soon", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("retry?now=soon: %d, want 400", resp.StatusCode)
	}
}
