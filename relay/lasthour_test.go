package relay_test

import (
	"context"
	"database/sql"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/genropy/postino/internal/testrig/sqltest"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
	"github.com/genropy/postino/relay/submissions"
)

// TestLastHourFromOutbox: the dashboard's last hour is what the outbox
// counted. A relay started again on the same outbox still shows what its
// previous run took in and sent; mail an app wrote into its submissions
// table counts as accepted, as mail by SMTP does; a message that could not
// be prepared (INVALID) is charted among the failures, with FAILED, and a
// deferral beside what was accepted and sent. On every store.
func TestLastHourFromOutbox(t *testing.T) {
	outboxes := sharedOutboxes()
	outboxes["bolt"] = func(*testing.T) func(*relay.Config) { return func(*relay.Config) {} }
	var chrome *chromium // one for every store's page, when there is one
	if _, err := os.Stat(chromiumPath); err == nil {
		chrome = startBrowser(t)
	}
	for name, outbox := range outboxes {
		t.Run(name, func(t *testing.T) {
			b := lastHourAcrossRestart(t, outbox(t))
			t.Run("page", func(t *testing.T) {
				if chrome == nil {
					needChromium(t)
				}
				p := chrome.tab(t, b)
				p.do(chromedp.Poll[chromedp.Void](`document.querySelector('#chart-throughput').dataset.totalSent === '3'`,
					chromedp.WithPollingTimeout(15*time.Second)))
				for attr, want := range map[string]string{"data-total-accepted": "6", "data-total-sent": "3", "data-total-deferred": "1"} {
					if got := p.attr(`#chart-throughput`, attr); got != want {
						t.Errorf("traffic chart %s %q, want %s", attr, got, want)
					}
				}
				if got := p.attr(`#chart-failures`, "data-total"); got != "2" {
					t.Errorf("failures chart total %q, want 2 (FAILED and INVALID)", got)
				}
				if got := p.text(`#total-failures`); !strings.Contains(got, "INVALID 1") || !strings.Contains(got, "FAILED 1") {
					t.Errorf("failures caption %q", got)
				}
				p.checkConsole()
			})
		})
	}
}

// lastHourAcrossRestart runs a relay on the outbox outbox points at, which
// takes mail by SMTP and from a submissions table: three messages sent,
// one failed, one deferred, one INVALID. It stops it, starts another on
// the same outbox and data directory, checks the last hour the new one
// reads, and returns it.
func lastHourAcrossRestart(t *testing.T, outbox func(*relay.Config)) *running {
	ctx := context.Background()
	app := sqltest.Database(t, "postgres")
	if err := submissions.Migrate(ctx, "postgres", app, submissions.DefaultTable); err != nil {
		t.Fatal(err)
	}
	cfg, up := testConfig(t)
	outbox(&cfg)
	pickyUpstream(up)
	first := cfg
	first.Submissions = []relay.SubmissionsConfig{{Driver: "postgres", DSN: app, Poll: relay.Duration(100 * time.Millisecond)}}
	a := start(t, first)
	smtpAddr := a.r.SMTPAddr().String()
	sent := []string{
		sendTo(t, smtpAddr, []string{"someone@example.net"}, "", "hello\r\n"),
		sendTo(t, smtpAddr, []string{"someone@example.net"}, "", "hello\r\n"),
	}
	failed := sendTo(t, smtpAddr, []string{"nobody@example.net"}, "", "hello\r\n")
	deferred := sendTo(t, smtpAddr, []string{"slow@example.net"}, "", "hello\r\n")
	db, err := sql.Open("pgx", app)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for id, msg := range map[string]string{
		"lh-submitted": "From: App <app@example.com>\r\nTo: user@example.net\r\nSubject: memo\r\n\r\nA memo.\r\n",
		"lh-invalid":   "To: user@example.net\r\nSubject: no From\r\n\r\nA memo.\r\n",
	} {
		_, err := db.Exec("INSERT INTO postino_submissions (id, mail_from, rcpt_to, message) VALUES ($1, $2, $3, $4)",
			id, "app@example.com", []string{"user@example.net"}, []byte(msg))
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range append(sent, "lh-submitted") {
		waitStatus(t, a.client, id, "SENT-ACKNOWLEDGED")
	}
	waitStatus(t, a.client, failed, "FAILED-ACKNOWLEDGED")
	waitStatus(t, a.client, "lh-invalid", "INVALID-ACKNOWLEDGED")
	waitMessage(t, a.client, deferred, func(m admin.Message) bool { return m.Status == "READY" && m.Attempts == 1 })
	want := map[string]int{"ACCEPTED": 6, "SENT": 3, "DEFERRED": 1, "FAILED": 1, "INVALID": 1, "BOUNCED": 0, "SUPPRESSED": 0}
	if got := lastHour(t, a.client); !maps.Equal(got, want) {
		t.Errorf("the last hour: %v, want %v", got, want)
	}
	a.stop()

	b := start(t, cfg)
	if got := lastHour(t, b.client); !maps.Equal(got, want) {
		t.Errorf("the last hour after a restart: %v, want %v", got, want)
	}
	return b
}

// lastHour adds up the outcomes of each minute of the last hour, as /v1/stats
// says them.
func lastHour(t *testing.T, c *admin.Client) map[string]int {
	t.Helper()
	stats, err := c.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(stats.Minutes) != 60 {
		t.Errorf("%d minutes, want the last hour's 60", len(stats.Minutes))
	}
	out := map[string]int{}
	for _, m := range stats.Minutes {
		for o, n := range m.Outcomes {
			out[o] += n
		}
	}
	return out
}
