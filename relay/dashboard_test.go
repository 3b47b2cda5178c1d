package relay_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/internal/testrig/dnstest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
	"github.com/genropy/postino/spool"
)

// chromiumPath is Debian's Chromium, which .ci/deps installs.
const chromiumPath = "/usr/bin/chromium"

// TestDashboardFiles checks how the page and its files are served: types,
// no caching without revalidation, and a policy that forbids inline script.
func TestDashboardFiles(t *testing.T) {
	cfg, _ := testConfig(t)
	rl := start(t, cfg)
	base := "http://" + rl.r.AdminAddr().String()
	for _, c := range []struct{ path, typ, body string }{
		{"/", "text/html", `<script src="/ui/app.js"`},
		{"/ui/app.js", "text/javascript", "/v1/stats"},
		{"/ui/style.css", "text/css", ":root"},
		{"/ui/index.html", "text/html", `id="queue"`},
	} {
		resp, err := http.Get(base + c.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		h := resp.Header
		if resp.StatusCode != 200 || !strings.HasPrefix(h.Get("Content-Type"), c.typ) || !strings.Contains(string(body), c.body) {
			t.Errorf("GET %s: %s %q, %d bytes", c.path, resp.Status, h.Get("Content-Type"), len(body))
		}
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "default-src 'self'") || strings.Contains(csp, "unsafe-inline") || h.Get("Cache-Control") != "no-cache" {
			t.Errorf("GET %s: policy %q, cache %q", c.path, csp, h.Get("Cache-Control"))
		}
	}
	for _, p := range []string{"/ui/", "/ui/nope.js", "/ui/../server.go", "/index.html"} {
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %s", p, resp.Status)
		}
	}
	// The page holds no inline script or style: the policy would block them.
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, bad := range []string{"<script>", "<style", " style=", " onclick=", "http://", "https://"} {
		if strings.Contains(string(page), bad) {
			t.Errorf("index.html has %q", bad)
		}
	}
}

// TestDashboard drives the page in a real headless Chromium, as an operator
// would: the queue by status and the charts, the latest failed message,
// searches, a timeline, Retry and Cancel from the page; then, on a relay
// with a token, the token form, a receipt download and a batch suspended
// and activated, each call carrying the token.
func TestDashboard(t *testing.T) {
	needChromium(t)
	chrome := startBrowser(t)

	t.Run("Operate", func(t *testing.T) {
		cfg, up := testConfig(t)
		var refusing atomic.Bool // the upstream refuses nobody@ while set
		refusing.Store(true)
		up.OnRcpt(func(to string) error {
			switch {
			case refusing.Load() && strings.HasPrefix(to, "nobody@"):
				return smtptest.Reply(550, smtp.EnhancedCode{5, 1, 1}, "no such user")
			case strings.HasPrefix(to, "slow@"):
				return smtptest.Reply(451, smtp.EnhancedCode{4, 2, 1}, "try again later")
			}
			return nil
		})
		rl := start(t, cfg)
		ctx := context.Background()
		smtpAddr := rl.r.SMTPAddr().String()
		var sent []string
		for range 3 {
			sent = append(sent, sendTo(t, smtpAddr, []string{"someone@example.net"}, "", "hello\r\n"))
		}
		const failedID, heldID, deferredID, scheduledID = "dash-fail-1", "dash-held-1", "dash-deferred-1", "dash-scheduled-1"
		sendTo(t, smtpAddr, []string{"nobody@example.net"}, "X-Genro-Mail-ID: "+failedID+"\r\n", "hello\r\n")
		// One waits in a suspended batch, to be cancelled from the page;
		// one was deferred by the upstream; one is scheduled for later.
		if err := rl.client.SuspendBatch(ctx, "held"); err != nil {
			t.Fatal(err)
		}
		sendTo(t, smtpAddr, []string{"later@example.net"}, "X-Genro-Mail-ID: "+heldID+"\r\nX-Postino-Batch: held\r\n", "hello\r\n")
		sendTo(t, smtpAddr, []string{"slow@example.net"}, "X-Genro-Mail-ID: "+deferredID+"\r\n", "hello\r\n")
		sendTo(t, smtpAddr, []string{"someone@example.org"}, fmt.Sprintf("X-Genro-Mail-ID: %s\r\nX-Postino-Send-After: %d\r\n",
			scheduledID, time.Now().Add(time.Hour).Unix()), "hello\r\n")
		for _, id := range sent {
			waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
		}
		failed := waitStatus(t, rl.client, failedID, "FAILED-ACKNOWLEDGED")
		waitStatus(t, rl.client, heldID, "READY")
		waitStatus(t, rl.client, scheduledID, "READY")
		waitMessage(t, rl.client, deferredID, func(m admin.Message) bool { return m.Status == "READY" && m.Attempts == 1 })

		p := chrome.tab(t, rl)
		// The queue by status, counted by the outbox, and READY told apart
		// by what its messages wait for.
		p.do(chromedp.WaitVisible(chromedp.CSS(`#queue tr[data-status="FAILED-ACKNOWLEDGED"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#queue tr[data-waiting="suspended"]`)))
		for status, want := range map[string]string{"SENT-ACKNOWLEDGED": "3", "FAILED-ACKNOWLEDGED": "1", "READY": "3"} {
			if got := p.text(`#queue tr[data-status="` + status + `"] td.count`); got != want {
				t.Errorf("%s count %q, want %s", status, got, want)
			}
		}
		for _, w := range []string{"deferred", "scheduled", "suspended"} {
			if got := p.text(`#queue tr[data-waiting="` + w + `"] td.count`); got != "1" {
				t.Errorf("READY %s count %q, want 1", w, got)
			}
		}
		if n := p.eval(`[String(document.querySelectorAll('#queue tr[data-waiting="due"]').length)]`); n[0] != "0" {
			t.Errorf("%s READY messages shown as due now, want none", n[0])
		}
		if got := p.text(`#queue-total`); got != "7" {
			t.Errorf("total %q, want 7", got)
		}
		// The suspended batch is listed.
		if got := p.text(`#suspended-batches li[data-batch="held"]`); !strings.Contains(got, "held") {
			t.Errorf("suspended batches %q", got)
		}
		// The failed message among the latest failed, its reason whole;
		// the charts were drawn from this relay's minutes: accepted, sent
		// and deferred as docs/operating.md says, and the failures.
		p.do(chromedp.WaitVisible(chromedp.CSS(`#recent-failed [data-open="` + failedID + `"]`)))
		if got := p.text(`#recent-failed li[data-id="` + failedID + `"] .reason`); !strings.Contains(got, "nobody@example.net: 550 5.1.1 no such user") {
			t.Errorf("latest failed reason %q", got)
		}
		for attr, want := range map[string]string{"data-total-accepted": "7", "data-total-sent": "3", "data-total-deferred": "1"} {
			if got := p.attr(`#chart-throughput`, attr); got != want {
				t.Errorf("traffic chart %s %q, want %s", attr, got, want)
			}
		}
		if got := p.text(`#total-throughput`); !strings.Contains(got, "accepted 7") || !strings.Contains(got, "deferred 1") {
			t.Errorf("traffic caption %q", got)
		}
		if got := p.attr(`#chart-failures`, "data-total"); got != "1" {
			t.Errorf("failures chart total %q, want 1", got)
		}
		p.checkReadable()
		p.shot("overview")

		// A search by recipient (in any letter case) lists the three
		// delivered messages.
		p.search("Someone@Example.NET")
		p.do(chromedp.WaitVisible(chromedp.CSS(`#results[data-count="3"]`)))
		for _, id := range sent {
			p.do(chromedp.WaitVisible(chromedp.CSS(`#results-list [data-open="` + id + `"]`)))
		}

		// Deferred and scheduled messages say so, and may be cancelled.
		for id, w := range map[string]string{deferredID: "deferred", scheduledID: "scheduled"} {
			p.search(id)
			p.do(chromedp.WaitVisible(chromedp.CSS(`#timeline[data-id="` + id + `"][data-waiting="` + w + `"] .badge[data-waiting="` + w + `"]`)))
			p.wantActions(id, "retry", "cancel")
		}
		p.checkReadable()
		p.shot("deferred")

		// A search by id opens the message's timeline: every status of its
		// history, and the recipient's 550. A failed message may be
		// retried, not cancelled.
		p.search(failedID)
		p.do(chromedp.WaitVisible(chromedp.CSS(`#timeline[data-id="` + failedID + `"] [data-testid=history]`)))
		got := p.eval(`[...document.querySelectorAll('#timeline li[data-type=status]')].map(li => li.dataset.status)`)
		var want []string
		for _, h := range failed.History {
			want = append(want, h.Status)
		}
		if !slices.Equal(got, want) {
			t.Errorf("timeline statuses %q, want the history %q", got, want)
		}
		// Each recipient's result says how its session was secured.
		rcpt := p.text(`#timeline [data-testid=recipients]`)
		for _, s := range []string{"nobody@example.net", "550", "5.1.1", "no such user", "tls", "policy", "verified"} {
			if !strings.Contains(rcpt, s) {
				t.Errorf("recipient results %q lack %q", rcpt, s)
			}
		}
		p.wantActions(failedID, "retry")
		p.checkReadable()
		p.shot("timeline")

		// Cancel the held message from the page (a second click confirms):
		// it fails after the first one did.
		p.search(heldID)
		p.do(chromedp.WaitVisible(chromedp.CSS(`#timeline[data-id="`+heldID+`"][data-status="READY"][data-waiting="suspended"]`)),
			chromedp.Click(chromedp.CSS(`#timeline button[data-action=cancel]`)),
			chromedp.Click(chromedp.CSS(`#timeline button[data-action=cancel]`)))
		waitStatus(t, rl.client, heldID, "FAILED-ACKNOWLEDGED")

		// Retry the first failed message from the page. The relay never
		// offers again a recipient that was refused for good
		// (TestRestartKeepsPermanentFailures), so even with the upstream
		// now willing the message fails again, after a second attempt that
		// the operator's retry started: it is the latest failed, before the
		// cancelled message that was created after it.
		refusing.Store(false)
		p.search(failedID)
		p.do(chromedp.WaitVisible(chromedp.CSS(`#timeline[data-id="`+failedID+`"]`)),
			chromedp.Click(chromedp.CSS(`#timeline button[data-action=retry]`)))
		m := waitMessage(t, rl.client, failedID, func(m admin.Message) bool { return m.Attempts == 2 && m.Status == "FAILED-ACKNOWLEDGED" })
		if !strings.Contains(historyText(m), "retry requested by an operator") {
			t.Errorf("history after the retry: %s", historyText(m))
		}
		p.do(chromedp.Poll[chromedp.Void](`[...document.querySelectorAll('#recent-failed li')].map(li => li.dataset.id).join(' ') === '`+
			failedID+` `+heldID+`'`, chromedp.WithPollingTimeout(15*time.Second)))
		if got := p.text(`#recent-failed li[data-id="` + failedID + `"]`); !strings.Contains(got, "2 attempts") {
			t.Errorf("the message that failed again reads %q", got)
		}

		// Activate the batch from its list, and Retry the cancelled
		// message: it is sent; a sent message offers no action.
		p.do(chromedp.Click(chromedp.CSS(`#suspended-batches li[data-batch="held"] button[data-action=activate]`)),
			chromedp.Poll[chromedp.Void](`!document.querySelector('#suspended-batches li[data-batch="held"]')`, chromedp.WithPollingTimeout(15*time.Second)))
		p.search(heldID)
		p.do(chromedp.WaitVisible(chromedp.CSS(`#timeline[data-id="`+heldID+`"][data-status="FAILED-ACKNOWLEDGED"]`)),
			chromedp.Click(chromedp.CSS(`#timeline button[data-action=retry]`)))
		m = waitStatus(t, rl.client, heldID, "SENT-ACKNOWLEDGED")
		if h := historyText(m); !strings.Contains(h, "cancelled by an operator") || !strings.Contains(h, "retry requested by an operator") {
			t.Errorf("history of the cancelled and retried message: %s", h)
		}
		p.do(chromedp.WaitVisible(chromedp.CSS(`#timeline[data-status="SENT-ACKNOWLEDGED"]`)))
		p.wantActions(heldID)
		p.checkReadable()
		p.shot("retried")
		p.checkConsole()
	})

	t.Run("Campaigns", func(t *testing.T) {
		cfg, up := testConfig(t)
		pickyUpstream(up)
		cfg.Brake = relay.BrakeConfig{MinSent: 4, HardRate: 0.2, ComplaintRate: 0.01}
		rl := start(t, cfg)
		addr := rl.r.SMTPAddr().String()
		for i := range 6 {
			to := fmt.Sprintf("someone%d@example.net", i)
			if i%2 == 0 {
				to = fmt.Sprintf("nobody@d%d.example.net", i)
			}
			sendTo(t, addr, []string{to}, "X-Postino-Batch: camp\r\n", "hello\r\n")
		}
		p := chrome.tab(t, rl)
		// The brake trips camp (half of its recipients are refused); the page says why, with the
		// rate over its threshold marked.
		p.do(chromedp.WaitVisible(chromedp.CSS(`#campaigns tr[data-batch="camp"] .badge`)),
			chromedp.WaitVisible(chromedp.CSS(`#campaigns tr[data-batch="camp"] td.over`)))
		if got := p.text(`#campaigns`); !strings.Contains(got, "TRIPPED") || !strings.Contains(got, "suspended by the brake: hard verdicts") {
			t.Errorf("campaigns read %q", got)
		}
		p.checkReadable()
		p.shot("campaigns")
		p.checkConsole()
	})

	t.Run("Destinations", func(t *testing.T) {
		port := smtptest.SharedPort(t, "127.0.0.2")
		mx := smtptest.Start(t, smtptest.Options{Addr: fmt.Sprintf("127.0.0.2:%d", port)})
		zone := dnstest.Zone{Records: []string{". IN NS a.root.test.", "example.test. IN MX 10 mx.site.test.", "mx.site.test. IN A 127.0.0.2"}}
		cfg, _ := testConfig(t)
		cfg.Routes.Default.Smarthost = ""
		cfg.Delivery.MXPort = port
		cfg.Delivery.DNS.Servers = []string{dnstest.Start(t, zone).Addr}
		rl := start(t, cfg)
		waitStatus(t, rl.client, sendTo(t, rl.r.SMTPAddr().String(), []string{"ann@example.test"}, "", "hello\r\n"), "SENT-ACKNOWLEDGED")
		if len(mx.Messages()) != 1 {
			t.Fatalf("the MX host got %d messages", len(mx.Messages()))
		}
		p := chrome.tab(t, rl)
		const row = `#site-list tr[data-site="mx.site.test"]`
		// Suspend it from its row (a second click confirms), then resume.
		p.do(chromedp.WaitVisible(chromedp.CSS(row+`[data-state="up"]`)),
			chromedp.Click(chromedp.CSS(row+` button[data-action=site-suspend]`)),
			chromedp.Click(chromedp.CSS(row+` button[data-action=site-suspend]`)),
			chromedp.WaitVisible(chromedp.CSS(row+`[data-state="suspended"]`)))
		if v, err := rl.client.Site(context.Background(), "mx.site.test"); err != nil || v.State != "suspended" || !strings.Contains(v.Why, "by operator") {
			t.Errorf("the site suspended from the page: %+v %v", v, err)
		}
		if got := p.text(`#site-list`); !strings.Contains(got, "suspended by operator") {
			t.Errorf("the sites read %q", got)
		}
		p.checkReadable()
		p.shot("destinations")
		p.do(chromedp.Click(chromedp.CSS(row+` button[data-action=site-resume]`)),
			chromedp.WaitVisible(chromedp.CSS(row+`[data-state="up"]`)))
		p.checkConsole()
	})

	t.Run("Suppressions", func(t *testing.T) {
		cfg, _ := testConfig(t)
		rl := start(t, cfg)
		ctx := context.Background()
		if _, err := rl.client.ImportSuppressions(ctx, strings.NewReader("address,scope,reason\n"+
			"gone@example.net,*,hard_bounce\nangry@Example.net,news,complaint\nann@example.org,*,manual\n"), ""); err != nil {
			t.Fatal(err)
		}
		p := chrome.tab(t, rl)
		answers := p.answerDialogs()
		p.do(chromedp.WaitVisible(chromedp.CSS(`#sup-list[data-count="3"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#sup-counts [data-sup-reason="hard_bounce"]`)))
		if got := p.text(`#sup-counts`); !strings.Contains(got, "3 in all") || !strings.Contains(got, "complaint 1") {
			t.Errorf("counts %q", got)
		}
		if got := p.text(`#sup-list tr[data-key="angry@example.net"]`); !strings.Contains(got, "stream news") || !strings.Contains(got, "angry@Example.net") {
			t.Errorf("the complaint's row reads %q", got)
		}
		p.checkReadable()
		p.shot("suppressions")

		// A search by the start of an address, its domain in any case.
		p.do(chromedp.SendKeys(chromedp.ID("sup-prefix"), "angry@EXAMPLE"), chromedp.Click(chromedp.CSS(`#sup-form button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`#sup-list[data-count="1"] tr[data-key="angry@example.net"]`)))
		// A count lists its reason.
		p.do(chromedp.Evaluate[chromedp.Void](`document.getElementById('sup-prefix').value = ''`),
			chromedp.Click(chromedp.CSS(`#sup-counts [data-sup-reason="manual"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#sup-list[data-count="1"] tr[data-key="ann@example.org"]`)))

		// Remove asks why; without an answer nothing is removed.
		answers <- nil
		p.do(chromedp.Click(chromedp.CSS(`#sup-list tr[data-key="ann@example.org"] button[data-action=unsuppress]`)))
		answers <- new("asked by phone")
		p.do(chromedp.Click(chromedp.CSS(`#sup-list tr[data-key="ann@example.org"] button[data-action=unsuppress]`)),
			chromedp.WaitVisible(chromedp.CSS(`#sup-list[data-count="0"]`)))
		if got := p.text(`#notice`); got != "ann@example.org is off the suppression list for every stream." {
			t.Errorf("notice %q", got)
		}
		d, err := rl.client.Suppression(ctx, "ann@example.org")
		if err != nil || len(d.Entries) != 0 || len(d.History) != 2 || d.History[1].Note != "asked by phone" || d.History[1].By != "operator" {
			t.Errorf("after the removal: %+v, %v", d, err)
		}
		p.do(chromedp.Poll[chromedp.Void](`document.querySelector('#sup-counts').textContent.includes('2 in all')`,
			chromedp.WithPollingTimeout(15*time.Second)))
		p.checkConsole()
	})

	t.Run("Token", func(t *testing.T) {
		cfg, _ := testConfig(t)
		const token = "dashboard-test-token"
		cfg.Admin.TokenFile = filepath.Join(t.TempDir(), "token")
		if err := os.WriteFile(cfg.Admin.TokenFile, []byte(token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		rl := start(t, cfg)
		rl.client.Token = token
		id := sendTo(t, rl.r.SMTPAddr().String(), []string{"someone@example.net"}, "X-Postino-Batch: spring\r\n", "hello\r\n")
		m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
		// A receipt kept beside it, as the PEC reader keeps them (in the
		// spool under the data directory), to download from the page.
		sp, err := spool.Open(filepath.Join(cfg.DataDir, "spool"))
		if err != nil {
			t.Fatal(err)
		}
		receipt := []byte("From: posta-certificata@provider.test\r\nSubject: ACCETTAZIONE: test\r\n\r\nricevuta\r\n")
		if err := sp.SaveReceipt(m.EmlPath, "accettazione.eml", receipt); err != nil {
			t.Fatal(err)
		}
		sp.Close()

		p := chrome.tab(t, rl)
		p.do(chromedp.WaitVisible(chromedp.ID("token-form")))
		p.shot("token-asked")
		// A wrong token is refused and asked again.
		p.do(chromedp.SendKeys(chromedp.ID("token"), "wrong"), chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)),
			chromedp.WaitVisible(chromedp.ID("auth-error")))
		if got := p.text(`#auth-error`); !strings.Contains(got, "refused") {
			t.Errorf("auth error %q", got)
		}
		p.do(chromedp.SendKeys(chromedp.ID("token"), token), chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)),
			chromedp.WaitVisible(chromedp.CSS(`#queue tr[data-status="SENT-ACKNOWLEDGED"]`)))
		if got := p.text(`#queue tr[data-status="SENT-ACKNOWLEDGED"] td.count`); got != "1" {
			t.Errorf("SENT-ACKNOWLEDGED count %q, want 1", got)
		}
		// The token is kept for the tab: a reload needs no form.
		p.do(chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#queue tr[data-status="SENT-ACKNOWLEDGED"]`)))
		if vis := p.eval(`[String(document.querySelector('#auth').hidden)]`); vis[0] != "true" {
			t.Errorf("token form shown again after a reload")
		}
		// The other calls carry it too: a search, the timeline, a batch
		// suspended and activated (a POST).
		p.search(id)
		p.do(chromedp.WaitVisible(chromedp.CSS(`#timeline[data-id="` + id + `"] [data-testid=history]`)))
		if got := p.download(`#timeline [data-testid=receipts] button[data-action=download][data-name="accettazione.eml"]`); string(got) != string(receipt) {
			t.Errorf("downloaded receipt %q, want %q", got, receipt)
		}
		p.do(chromedp.Click(chromedp.CSS(`#timeline button[data-action=suspend]`)),
			chromedp.Click(chromedp.CSS(`#timeline button[data-action=suspend]`)),
			chromedp.WaitVisible(chromedp.CSS(`#notice`)))
		if got := p.text(`#notice`); got != "Batch spring is suspended." {
			t.Errorf("notice after suspend %q", got)
		}
		p.do(chromedp.Click(chromedp.CSS(`#timeline button[data-action=activate]`)))
		p.do(chromedp.Poll[chromedp.Void](`document.querySelector('#notice').textContent === 'Batch spring is active.'`,
			chromedp.WithPollingTimeout(5*time.Second)))
		p.shot("token-accepted")
		p.checkConsole()
	})
}

// waitMessage waits until the message is as ok says.
func waitMessage(t *testing.T, c *admin.Client, id string, ok func(admin.Message) bool) admin.Message {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m, err := c.Get(context.Background(), id)
		if err == nil && ok(m) {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s after %d attempts (%v): %s", id, m.Status, m.Attempts, err, m.Reason)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// needChromium fails the test under CI, and skips it elsewhere, when
// Chromium is not there to drive the page.
func needChromium(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(chromiumPath); err != nil {
		msg := "the dashboard test needs Chromium at " + chromiumPath + ": apt-get update && apt-get install -y chromium (.ci/deps installs it)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// chromium is one headless Chromium for the test; each subtest has a tab.
type chromium struct {
	ctx context.Context
}

func startBrowser(t *testing.T) *chromium {
	t.Helper()
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromiumPath),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := chromedp.NewContext(actx)
	// Cleanups run last first: the browser has exited before its user data
	// directory is removed.
	t.Cleanup(func() {
		chromedp.Cancel(ctx)
		cancel()
		cancelAlloc()
	})
	// The first call starts the browser, bound to the context it is given:
	// so it gets ctx itself, not one with a deadline.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", chromiumPath, err)
	}
	return &chromium{ctx: ctx}
}

// page is one tab on the dashboard of one relay.
type page struct {
	t   *testing.T
	ctx context.Context
	dir string

	mu       sync.Mutex
	problems []string
}

// tab opens the relay's dashboard in a new tab, and collects what the page
// reports as broken: uncaught exceptions, console errors, and the browser's
// own complaints (a blocked script or style, say).
func (b *chromium) tab(t *testing.T, rl *running) *page {
	t.Helper()
	ctx, cancel := chromedp.NewContext(b.ctx)
	t.Cleanup(cancel)
	p := &page{t: t, ctx: ctx, dir: t.ArtifactDir()}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			// A 401 is how the page learns that it needs the token: the
			// browser logs it as a network error, which is expected.
			if (m.Type == chromedp.ConsoleError || m.IsException()) && m.Source != "network" {
				p.mu.Lock()
				p.problems = append(p.problems, m.String())
				p.mu.Unlock()
			}
		}
	}()
	p.do(chromedp.Navigate("http://" + rl.r.AdminAddr().String() + "/"))
	return p
}

// do runs the actions, each wait bounded, and on failure keeps a
// screenshot of what the page showed.
func (p *page) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.shot("failure")
		p.t.Fatalf("in the browser: %v", err)
	}
}

func (p *page) text(sel string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		p.t.Fatalf("text of %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

func (p *page) attr(sel, name string) string {
	p.t.Helper()
	v := p.eval(`[document.querySelector(` + jsString(sel) + `)?.getAttribute(` + jsString(name) + `) ?? '']`)
	return v[0]
}

// eval runs an expression that gives a list of strings.
func (p *page) eval(expr string) []string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// wantActions checks the action buttons of the open message: those the
// API takes for it, no other.
func (p *page) wantActions(id string, want ...string) {
	p.t.Helper()
	got := p.eval(`[...document.querySelectorAll('#timeline .actions button[data-id]')].map(b => b.dataset.action)`)
	if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
		p.t.Errorf("%s offers %q, want %q", id, got, want)
	}
}

// timePattern is the one way the page writes a time.
var timePattern = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$`)

// checkReadable checks what the page shows: every time in one format, and
// in no other (no RFC 3339 left in a text); no raw JSON; no reason cut
// off on one line.
func (p *page) checkReadable() {
	p.t.Helper()
	for _, w := range p.eval(`[...document.querySelectorAll('.when')].map(e => e.textContent.trim()).filter(Boolean)`) {
		if !timePattern.MatchString(w) {
			p.t.Errorf("a time reads %q", w)
		}
	}
	body := p.eval(`[document.body.innerText]`)[0]
	if iso := regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d`).FindString(body); iso != "" {
		p.t.Errorf("the page shows the time %q in another format", iso)
	}
	for _, raw := range []string{`{"`, `":`, `[{`} {
		if strings.Contains(body, raw) {
			p.t.Errorf("the page shows raw JSON (%q)", raw)
		}
	}
	if cut := p.eval(`[...document.querySelectorAll('.reason')].filter(e => e.offsetParent && e.scrollWidth > e.clientWidth + 1).map(e => e.textContent)`); len(cut) > 0 {
		p.t.Errorf("reasons cut off: %q", cut)
	}
}

func (p *page) search(q string) {
	p.t.Helper()
	// Click the button as a person would: chromedp.Submit calls
	// form.submit(), which skips the page's submit handler.
	p.do(chromedp.Evaluate[chromedp.Void](`document.getElementById('search').value = ''`),
		chromedp.SendKeys(chromedp.ID("search"), q),
		chromedp.Click(chromedp.CSS(`#search-form button[type=submit]`)))
}

// download clicks a download button and returns the file the browser
// saved.
func (p *page) download(sel string) []byte {
	p.t.Helper()
	dir := p.t.TempDir()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	events := chromedp.BrowserEvents(ctx, browser.DownloadProgress)
	if _, err := chromedp.CallBrowser(ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllow, DownloadPath: dir, EventsEnabled: new(true)}); err != nil {
		p.t.Fatalf("allow downloads: %v", err)
	}
	p.do(chromedp.Click(chromedp.CSS(sel)))
	for ev, err := range events {
		if err != nil {
			p.t.Fatalf("download of %s: %v", sel, err)
		}
		if ev.State == browser.DownloadProgressStateCanceled {
			p.t.Fatalf("download of %s canceled", sel)
		}
		if ev.State == browser.DownloadProgressStateCompleted {
			break
		}
	}
	files, _ := os.ReadDir(dir)
	if len(files) != 1 {
		p.t.Fatalf("download of %s: %d files in %s", sel, len(files), dir)
	}
	p.t.Logf("downloaded %s", files[0].Name())
	b, err := os.ReadFile(filepath.Join(dir, files[0].Name()))
	if err != nil {
		p.t.Fatal(err)
	}
	return b
}

// shot keeps a screenshot of the whole page in the test's artifacts.
func (p *page) shot(name string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(p.dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p.t.Logf("screenshot: %s", path)
}

func (p *page) checkConsole() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.problems {
		p.t.Errorf("the page reported: %s", m)
	}
}

// answerDialogs answers the page's prompts with what the test sends,
// in turn: a text accepts the prompt with it, nil dismisses it.
func (p *page) answerDialogs() chan<- *string {
	answers := make(chan *string, 1)
	opening := chromedp.Events(p.ctx, cdppage.JavascriptDialogOpening)
	go func() {
		for _, err := range opening {
			if err != nil {
				return
			}
			a := <-answers
			params := cdppage.HandleJavaScriptDialogParams{Accept: a != nil}
			if a != nil {
				params.PromptText = *a
			}
			// Not on the goroutine that receives the events.
			go chromedp.Call(p.ctx, cdppage.HandleJavaScriptDialog, params)
		}
	}()
	return answers
}

// jsString quotes s for a JavaScript expression.
func jsString(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}
