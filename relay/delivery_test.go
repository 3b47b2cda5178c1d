package relay_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/internal/testrig/dnstest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/internal/testrig/testcert"
	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
)

// fastRetry makes the retry schedule fit in a test.
func fastRetry(cfg *relay.Config) {
	cfg.Delivery.Retry = relay.RetryConfig{First: relay.Duration(100 * time.Millisecond), Max: relay.Duration(200 * time.Millisecond),
		MaxAge: relay.Duration(time.Hour), Jitter: 0.2}
}

// sendTo submits one message to several recipients and returns its id.
func sendTo(t *testing.T, addr string, rcpts []string, header, body string) string {
	t.Helper()
	return sendRaw(t, addr, "app@example.com", rcpts,
		fmt.Appendf(nil, "From: app@example.com\r\nTo: %s\r\n%sSubject: delivery test\r\n\r\n%s", strings.Join(rcpts, ", "), header, body))
}

// pickyUpstream has the upstream refuse nobody@… recipients for good, and
// put slow@… ones off for now.
func pickyUpstream(up *smtptest.Server) {
	up.OnRcpt(func(to string) error {
		switch {
		case strings.HasPrefix(to, "nobody@"):
			return smtptest.Reply(550, smtp.EnhancedCode{5, 1, 1}, "no such user")
		case strings.HasPrefix(to, "slow@"):
			return smtptest.Reply(451, smtp.EnhancedCode{4, 2, 1}, "try again later")
		}
		return nil
	})
}

func recipient(m admin.Message, addr string) outcome.Recipient {
	for _, r := range m.Recipients {
		if r.Address == addr {
			return r
		}
	}
	return outcome.Recipient{}
}

func TestDeliverySuccess(t *testing.T) {
	cfg, up := testConfig(t)
	rl := start(t, cfg)
	ids := make([]string, 5)
	for i := range ids {
		ids[i] = sendTo(t, rl.r.SMTPAddr().String(), []string{"a@example.net", "b@example.org"}, "", "hello\r\n.dot line\r\n")
	}
	for _, id := range ids {
		m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
		for _, a := range []string{"a@example.net", "b@example.org"} {
			if r := recipient(m, a); r.Status != "sent" || r.Code != 250 || r.Host != "127.0.0.1" {
				t.Errorf("%s %s: %+v", id, a, r)
			}
		}
		if !strings.Contains(m.Reason, "delivered to 2 of 2 recipients via default") {
			t.Errorf("reason %q", m.Reason)
		}
		var details bool
		for _, h := range m.History {
			if h.Status == "SENT" && h.Details != nil {
				details = true
			}
		}
		if !details {
			t.Errorf("%s: no attempt details in the history", id)
		}
	}
	msgs := up.Messages()
	if len(msgs) != len(ids) {
		t.Fatalf("upstream got %d messages", len(msgs))
	}
	for _, m := range msgs {
		if !strings.Contains(string(m.Data), "\r\n.dot line\r\n") || m.From != "app@example.com" || len(m.To) != 2 {
			t.Errorf("upstream got %+v", m)
		}
		// The upstream offers DSN: its bounces will name the message.
		if id := m.Header("X-Genro-Mail-ID"); m.Opts.EnvelopeID != id || m.Opts.Return != smtp.DSNReturnHeaders {
			t.Errorf("MAIL FROM of %s had ENVID %q RET %q", id, m.Opts.EnvelopeID, m.Opts.Return)
		}
	}
	if n := up.Connections(); n >= len(ids) {
		t.Errorf("%d connections for %d messages: sessions are not reused", n, len(ids))
	}
}

func TestDeliveryRecipientRefused(t *testing.T) {
	cfg, up := testConfig(t)
	pickyUpstream(up)
	rl := start(t, cfg)
	id := sendTo(t, rl.r.SMTPAddr().String(), []string{"nobody@example.net", "someone@example.net"}, "", "x\r\n")
	m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	if r := recipient(m, "nobody@example.net"); r.Status != "failed" || r.Code != 550 || r.EnhancedCode != "5.1.1" || r.Text != "no such user" {
		t.Errorf("refused recipient %+v", r)
	}
	if r := recipient(m, "someone@example.net"); r.Status != "sent" {
		t.Errorf("accepted recipient %+v", r)
	}
	if msgs := up.Messages(); len(msgs) != 1 || len(msgs[0].To) != 1 || msgs[0].To[0] != "someone@example.net" {
		t.Errorf("upstream got %+v", msgs)
	}

	// The 550 5.1.1 put the address on the suppression list: it is not
	// mailed again.
	all := sendTo(t, rl.r.SMTPAddr().String(), []string{"nobody@example.net"}, "", "x\r\n")
	m = waitStatus(t, rl.client, all, "SUPPRESSED-ACKNOWLEDGED")
	if !strings.Contains(m.Reason, "not sent: every recipient is suppressed; nobody@example.net: suppressed for every stream since") ||
		!strings.HasSuffix(m.Reason, "hard_bounce") || m.Attempts != 0 {
		t.Errorf("reason %q attempts %d", m.Reason, m.Attempts)
	}
	if msgs := up.Messages(); len(msgs) != 1 {
		t.Errorf("upstream got %d messages, want still 1", len(msgs))
	}
}

func TestDeliveryRetry(t *testing.T) {
	cfg, up := testConfig(t)
	fastRetry(&cfg)
	var tries atomic.Int32
	up.OnRcpt(func(to string) error {
		if strings.HasPrefix(to, "later@") && tries.Add(1) == 1 {
			return smtptest.Reply(451, smtp.EnhancedCode{4, 2, 0}, "greylisted, try again")
		}
		if strings.HasPrefix(to, "never@") {
			return smtptest.Reply(550, smtp.EnhancedCode{5, 1, 1}, "no such user")
		}
		return nil
	})
	rl := start(t, cfg)
	id := sendTo(t, rl.r.SMTPAddr().String(), []string{"later@example.net", "never@example.net", "now@example.net"}, "", "x\r\n")
	m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	if m.Attempts != 2 {
		t.Errorf("attempts %d, want 2", m.Attempts)
	}
	if got := statuses(m); !strings.Contains(got, "PROCESSING READY PROCESSING SENT") {
		t.Errorf("history %s", got)
	}
	var deferred string
	for _, h := range m.History {
		if h.Status == "READY" && strings.HasPrefix(h.Reason, "deferred") {
			deferred = h.Reason
		}
	}
	if !strings.Contains(deferred, "later@example.net: 451 4.2.0 greylisted") {
		t.Errorf("deferral reason %q", deferred)
	}
	msgs := up.Messages()
	if len(msgs) != 2 || fmt.Sprint(msgs[0].To) != "[now@example.net]" || fmt.Sprint(msgs[1].To) != "[later@example.net]" {
		t.Errorf("upstream got %+v: the second attempt must carry only the deferred recipient", msgs)
	}
	if r := recipient(m, "never@example.net"); r.Status != "failed" {
		t.Errorf("refused recipient %+v", r)
	}
}

func TestDeliveryRefusedAfterData(t *testing.T) {
	cfg, up := testConfig(t)
	fastRetry(&cfg)
	up.OnData(func(smtptest.Message) error {
		return smtptest.Reply(554, smtp.EnhancedCode{5, 7, 1}, "message content rejected")
	})
	rl := start(t, cfg)
	id := sendTo(t, rl.r.SMTPAddr().String(), []string{"a@example.net", "b@example.net"}, "", "spam\r\n")
	m := waitStatus(t, rl.client, id, "FAILED-ACKNOWLEDGED")
	for _, r := range m.Recipients {
		if r.Status != "failed" || r.Code != 554 || r.EnhancedCode != "5.7.1" {
			t.Errorf("recipient %+v", r)
		}
	}
	if m.Attempts != 1 {
		t.Errorf("a 5xx after DATA was retried: %d attempts", m.Attempts)
	}
}

func TestDeliveryTemporaryAfterData(t *testing.T) {
	for _, tt := range []struct {
		name  string
		setup func(up *smtptest.Server, cfg *relay.Config)
		want  string
	}{
		{"451 after data", func(up *smtptest.Server, cfg *relay.Config) {
			var n atomic.Int32
			up.OnData(func(smtptest.Message) error {
				if n.Add(1) == 1 {
					return smtptest.Reply(451, smtp.EnhancedCode{4, 3, 0}, "queue full")
				}
				return nil
			})
		}, "451 4.3.0 queue full"},
		{"hanging upstream", func(up *smtptest.Server, cfg *relay.Config) {
			up.Hang(time.Second)
			cfg.Delivery.Timeouts.DataEnd = relay.Duration(200 * time.Millisecond)
			go func() { time.Sleep(1500 * time.Millisecond); up.Hang(0) }()
		}, "timeout"},
		{"dropped in data", func(up *smtptest.Server, cfg *relay.Config) {
			up.DropInData(true)
			go func() { time.Sleep(500 * time.Millisecond); up.DropInData(false) }()
		}, "no reply"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, up := testConfig(t)
			fastRetry(&cfg)
			tt.setup(up, &cfg)
			rl := start(t, cfg)
			id := sendTo(t, rl.r.SMTPAddr().String(), []string{"a@example.net", "b@example.net"}, "", "x\r\n")
			m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
			if m.Attempts < 2 {
				t.Errorf("attempts %d: the temporary failure was not retried", m.Attempts)
			}
			found := false
			for _, h := range m.History {
				if h.Status == "READY" && strings.Contains(h.Reason, "deferred") && strings.Contains(h.Reason, tt.want) {
					found = true
				}
			}
			if !found {
				t.Errorf("no deferral saying %q: %s", tt.want, historyText(m))
			}
		})
	}
}

func historyText(m admin.Message) string {
	var b strings.Builder
	for _, h := range m.History {
		fmt.Fprintf(&b, "\n  %s: %s", h.Status, h.Reason)
	}
	return b.String()
}

func TestDeliveryGreetingTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // never says a word
		}
	}()
	cfg, _ := testConfig(t)
	cfg.Routes.Default.Smarthost = l.Addr().String()
	cfg.Delivery.Timeouts.Greeting = relay.Duration(200 * time.Millisecond)
	rl := start(t, cfg)
	id := sendTo(t, rl.r.SMTPAddr().String(), []string{"a@example.net"}, "", "x\r\n")
	deadline := time.Now().Add(60 * time.Second)
	for {
		m, _ := rl.client.Get(context.Background(), id)
		if m.Status == "READY" && m.Attempts == 1 {
			if r := recipient(m, "a@example.net"); r.Status != "pending" || !strings.Contains(r.Text, "greeting") {
				t.Errorf("recipient %+v", r)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %s %+v", m.Status, historyText(m))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestDeliveryNeedsSMTPUTF8(t *testing.T) {
	up := smtptest.Start(t, smtptest.Options{NoSMTPUTF8: true})
	cfg, _ := testConfig(t)
	cfg.Routes.Default.Smarthost = up.Addr
	rl := start(t, cfg)
	c, err := smtp.Dial(rl.r.SMTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Mail("josé@exämple.com", &smtp.MailOptions{UTF8: true}); err != nil {
		t.Fatal(err)
	}
	c.Rcpt("zoë@example.net", nil)
	w, _ := c.Data()
	fmt.Fprint(w, "From: josé@exämple.com\r\n\r\nciao\r\n")
	resp, err := w.CloseWithResponse()
	if err != nil {
		t.Fatal(err)
	}
	_, id, _ := strings.Cut(resp.StatusText, "queued as ")
	m := waitStatus(t, rl.client, id, "FAILED-ACKNOWLEDGED")
	if r := m.Recipients[0]; r.Code != 554 || r.EnhancedCode != "5.6.7" || !strings.Contains(r.Text, "SMTPUTF8") {
		t.Errorf("recipient %+v", r)
	}
	if len(up.Messages()) != 0 {
		t.Error("the message reached an upstream without SMTPUTF8")
	}
}

func TestDeliveryTooLarge(t *testing.T) {
	up := smtptest.Start(t, smtptest.Options{MaxSize: 2000})
	cfg, _ := testConfig(t)
	cfg.Routes.Default.Smarthost = up.Addr
	rl := start(t, cfg)
	id := sendTo(t, rl.r.SMTPAddr().String(), []string{"a@example.net"}, "", strings.Repeat("0123456789\r\n", 300))
	m := waitStatus(t, rl.client, id, "FAILED-ACKNOWLEDGED")
	if r := m.Recipients[0]; r.Code != 552 || r.EnhancedCode != "5.3.4" || !strings.Contains(r.Text, "larger than the 2000 octets") {
		t.Errorf("recipient %+v", r)
	}
}

func TestDeliveryExpires(t *testing.T) {
	cfg, up := testConfig(t)
	cfg.Delivery.Retry = relay.RetryConfig{First: relay.Duration(50 * time.Millisecond), Max: relay.Duration(50 * time.Millisecond),
		MaxAge: relay.Duration(300 * time.Millisecond), Jitter: 0}
	up.OnRcpt(func(string) error { return smtptest.Reply(450, smtp.EnhancedCode{4, 2, 1}, "mailbox busy") })
	rl := start(t, cfg)
	id := sendTo(t, rl.r.SMTPAddr().String(), []string{"a@example.net"}, "", "x\r\n")
	m := waitStatus(t, rl.client, id, "FAILED-ACKNOWLEDGED")
	if !strings.HasPrefix(m.Reason, "expired") || m.Attempts < 2 || !strings.Contains(m.Recipients[0].Text, "expired") {
		t.Errorf("reason %q attempts %d recipient %+v", m.Reason, m.Attempts, m.Recipients[0])
	}
}

func TestDeliveryConnectionLimitAndReuse(t *testing.T) {
	cfg, up := testConfig(t)
	cfg.Routes.Default.MaxConnections = 1
	rl := start(t, cfg)
	var ids []string
	for range 10 {
		ids = append(ids, sendTo(t, rl.r.SMTPAddr().String(), []string{"a@example.net"}, "", "x\r\n"))
	}
	for _, id := range ids {
		waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	}
	if n := up.Connections(); n != 1 {
		t.Errorf("%d connections with max_connections 1 and sessions reused", n)
	}
}

func TestDeliverySmarthostTLS(t *testing.T) {
	cert := testcert.New(t)
	for _, tt := range []struct {
		name     string
		implicit bool
		mode     string
	}{
		{"starttls", false, "starttls"},
		{"implicit", true, "tls"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := smtptest.Start(t, smtptest.Options{TLS: cert.ServerConfig(), Implicit: tt.implicit, Auth: map[string]string{"relay": "upstream-pw"}})
			t.Setenv("UPSTREAM_PW", "upstream-pw")
			cfg, _ := testConfig(t)
			cfg.Routes.Default = relay.RouteConfig{Smarthost: up.Addr, TLS: tt.mode, TLSCAFile: cert.CAFile,
				Username: "relay", PasswordEnv: "UPSTREAM_PW", MaxConnections: 2}
			rl := start(t, cfg)
			id := sendTo(t, rl.r.SMTPAddr().String(), []string{"a@example.net"}, "", "secret\r\n")
			waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
			msgs := up.Messages()
			if len(msgs) != 1 || !msgs[0].TLS || msgs[0].AuthUser != "relay" {
				t.Errorf("upstream got %+v", msgs)
			}
		})
	}
	t.Run("unverified certificate", func(t *testing.T) {
		up := smtptest.Start(t, smtptest.Options{TLS: cert.ServerConfig()})
		cfg, _ := testConfig(t)
		cfg.Routes.Default = relay.RouteConfig{Smarthost: up.Addr, TLS: "starttls", MaxConnections: 2}
		rl := start(t, cfg)
		id := sendTo(t, rl.r.SMTPAddr().String(), []string{"a@example.net"}, "", "x\r\n")
		m := waitAttempt(t, rl.client, id)
		if r := m.Recipients[0]; r.Status != "pending" || !strings.Contains(r.Text, "certificate") {
			t.Errorf("a certificate from an unknown authority was accepted: %+v", r)
		}
		if len(up.Messages()) != 0 {
			t.Error("the upstream got the message")
		}
	})
}

// waitAttempt waits for a first attempt to be recorded.
func waitAttempt(t *testing.T, c *admin.Client, id string) admin.Message {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m, err := c.Get(context.Background(), id)
		if err == nil && m.Attempts > 0 {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("no attempt of %s: %v %s", id, err, historyText(m))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDeliveryMX: MX delivery asks the servers of delivery.dns.servers,
// takes the MX hosts by preference, passes a host that takes no
// connection, falls back on the domain's address without MX, fails a null
// MX and, two servers saying it, a domain that does not exist.
func TestDeliveryMX(t *testing.T) {
	port := smtptest.SharedPort(t, "127.0.0.2", "127.0.0.3", "127.0.0.4")
	cert := testcert.New(t, "mx1.test")
	mx1 := smtptest.Start(t, smtptest.Options{Addr: fmt.Sprintf("127.0.0.2:%d", port), TLS: cert.ServerConfig()})
	mx2 := smtptest.Start(t, smtptest.Options{Addr: fmt.Sprintf("127.0.0.3:%d", port)})
	zone := dnstest.Zone{Records: []string{
		". IN NS a.root.test.",
		"pref.example. IN MX 20 mx2.test.", "pref.example. IN MX 10 mx1.test.",
		"down.example. IN MX 10 dead.test.", "down.example. IN MX 20 mx2.test.",
		"null.example. IN MX 0 .",
		"mx1.test. IN A 127.0.0.2", "mx2.test. IN A 127.0.0.3", "dead.test. IN A 127.0.0.4",
		"amx.example. IN A 127.0.0.2",
	}, AD: true}
	dns1, dns2 := dnstest.Start(t, zone), dnstest.Start(t, zone)
	cfg, _ := testConfig(t)
	cfg.Routes.Default.Smarthost = ""
	cfg.Delivery.DNS.Servers = []string{dns1.Addr, dns2.Addr}
	cfg.Delivery.DNS.Validating = true
	cfg.Delivery.MXPort = port
	rl := start(t, cfg)
	smtpAddr := rl.r.SMTPAddr().String()

	tests := []struct {
		rcpt   string
		status string
		up     *smtptest.Server
		want   string // in the recipient's text for failures
	}{
		{rcpt: "a@pref.example", status: "SENT-ACKNOWLEDGED", up: mx1},
		{rcpt: "b@down.example", status: "SENT-ACKNOWLEDGED", up: mx2},
		{rcpt: "c@amx.example", status: "SENT-ACKNOWLEDGED", up: mx1},
		{rcpt: "d@nx.example", status: "FAILED-ACKNOWLEDGED", want: "550 5.1.2"},
		{rcpt: "e@null.example", status: "FAILED-ACKNOWLEDGED", want: "556 5.1.10"},
	}
	for _, tt := range tests {
		t.Run(tt.rcpt, func(t *testing.T) {
			id := sendTo(t, smtpAddr, []string{tt.rcpt}, "X-Genro-Mail-ID: mx-"+strings.Split(tt.rcpt, "@")[0]+"\r\n", "x\r\n")
			m := waitStatus(t, rl.client, id, tt.status)
			r := m.Recipients[0]
			if tt.up == nil {
				if got := fmt.Sprintf("%d %s", r.Code, r.EnhancedCode); got != tt.want {
					t.Errorf("recipient %+v, want %s", r, tt.want)
				}
				return
			}
			found := false
			for _, msg := range tt.up.Messages() {
				if msg.Header("X-Genro-Mail-ID") == id {
					found = true
					if tt.up == mx1 && !msg.TLS {
						t.Error("mx1 offers STARTTLS but the session was not encrypted")
					}
				}
			}
			if !found {
				t.Errorf("%s did not reach the expected MX host (recipient %+v)", id, r)
			}
		})
	}

	// One message for two domains: one transaction per domain.
	id := sendTo(t, smtpAddr, []string{"x@pref.example", "y@down.example"}, "", "x\r\n")
	m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	if recipient(m, "x@pref.example").Host != "mx1.test" || recipient(m, "y@down.example").Host != "mx2.test" {
		t.Errorf("recipients %+v", m.Recipients)
	}
	// delivery.dns.validating: the questions ask for DNSSEC.
	qs := dns1.Queries()
	if len(qs) == 0 {
		t.Fatal("the first server was asked nothing")
	}
	for _, q := range qs {
		if !q.DO || !q.AD {
			t.Errorf("question %+v: validating servers are asked with DO and AD", q)
		}
	}
}

func TestRouteRules(t *testing.T) {
	billing := smtptest.Start(t, smtptest.Options{})
	partner := smtptest.Start(t, smtptest.Options{})
	cfg, def := testConfig(t)
	cfg.Routes.Default.BounceAddress = "bounces+{id}@relay.example"
	cfg.Routes.Senders = []relay.RouteConfig{
		{Name: "billing", Match: relay.MatchConfig{Sender: "billing@example.com"}, Smarthost: billing.Addr},
		{Name: "partner", Match: relay.MatchConfig{Domain: "partner.example"}, Smarthost: partner.Addr},
	}
	rl := start(t, cfg)
	send := func(from string) string {
		c, err := smtp.Dial(rl.r.SMTPAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.SendMail(from, []string{"user@example.net"}, strings.NewReader("From: "+from+"\r\n\r\nx\r\n")); err != nil {
			t.Fatal(err)
		}
		page, _ := rl.client.List(context.Background(), admin.ListFilter{Limit: 1})
		return page.Messages[0].ID
	}
	for _, tt := range []struct {
		from  string
		up    *smtptest.Server
		route string
	}{
		{"billing@example.com", billing, "billing"},
		{"news@partner.example", partner, "partner"},
		{"app@example.com", def, "default"},
	} {
		id := send(tt.from)
		m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
		if m.Route != tt.route {
			t.Errorf("%s took route %s, want %s", tt.from, m.Route, tt.route)
		}
		msgs := tt.up.Messages()
		if len(msgs) != 1 {
			t.Fatalf("%s: upstream of %s got %d messages", tt.from, tt.route, len(msgs))
		}
		wantFrom := tt.from
		if tt.route == "default" {
			wantFrom = "bounces+" + id + "@relay.example"
		}
		if msgs[0].From != wantFrom {
			t.Errorf("envelope sender %s, want %s", msgs[0].From, wantFrom)
		}
	}
}

func TestShutdownHandsBack(t *testing.T) {
	cfg, up := testConfig(t)
	up.Hang(5 * time.Second)
	cfg.Delivery.ShutdownTimeout = relay.Duration(300 * time.Millisecond)
	rl := start(t, cfg)
	id := sendTo(t, rl.r.SMTPAddr().String(), []string{"a@example.net"}, "", "x\r\n")
	waitStatus(t, rl.client, id, "PROCESSING")
	stopped := time.Now()
	rl.stop()
	if d := time.Since(stopped); d > 3*time.Second {
		t.Errorf("the stop took %s with a 300ms shutdown timeout", d)
	}
	up.Hang(0)

	rl2 := start(t, cfg)
	m := waitStatus(t, rl2.client, id, "SENT-ACKNOWLEDGED")
	handedBack := false
	for _, h := range m.History {
		if h.Status == "READY" && strings.Contains(h.Reason, "handed back at shutdown") {
			handedBack = true
		}
	}
	if !handedBack || m.Attempts != 1 {
		t.Errorf("attempts %d, history %s", m.Attempts, historyText(m))
	}
}

func TestRestartKeepsPermanentFailures(t *testing.T) {
	cfg, up := testConfig(t)
	cfg.Delivery.Retry = relay.RetryConfig{First: relay.Duration(time.Hour), Max: relay.Duration(time.Hour), MaxAge: relay.Duration(48 * time.Hour), Jitter: 0}
	up.OnRcpt(func(to string) error {
		switch {
		case strings.HasPrefix(to, "gone@"):
			return smtptest.Reply(550, smtp.EnhancedCode{5, 1, 1}, "no such user")
		case strings.HasPrefix(to, "busy@"):
			return smtptest.Reply(452, smtp.EnhancedCode{4, 2, 2}, "mailbox full")
		}
		return nil
	})
	rl := start(t, cfg)
	id := sendTo(t, rl.r.SMTPAddr().String(), []string{"gone@example.net", "busy@example.net", "ok@example.net"}, "", "x\r\n")
	waitAttempt(t, rl.client, id)
	rl.stop()

	up.OnRcpt(nil) // the upstream now takes anything: only busy@ may be tried again
	rl2 := start(t, cfg)
	if _, err := rl2.client.Retry(context.Background(), id, false); err != nil {
		t.Fatal(err)
	}
	m := waitStatus(t, rl2.client, id, "SENT-ACKNOWLEDGED")
	if r := recipient(m, "gone@example.net"); r.Status != "failed" {
		t.Errorf("the refused recipient %+v", r)
	}
	msgs := up.Messages()
	if len(msgs) != 2 || fmt.Sprint(msgs[1].To) != "[busy@example.net]" {
		t.Errorf("upstream got %+v", msgs)
	}
}

// TestDeliveryVerdicts: what a reply says of the address, kept with each
// recipient and told to the plugins. A 550 5.1.1 at RCPT TO is hard; a 452
// 4.2.2 at RCPT TO is soft, and so is a 550 5.1.1 at the end of DATA,
// which comes after the upstream took the address; an accepted recipient
// has no verdict, one accepted at a later attempt none any more.
func TestDeliveryVerdicts(t *testing.T) {
	cfg, up := testConfig(t)
	fastRetry(&cfg)
	out := testPlugin(t, &cfg, "ok", nil)
	var full atomic.Bool
	full.Store(true)
	up.OnRcpt(func(to string) error {
		switch {
		case strings.HasPrefix(to, "gone@"):
			return smtptest.Reply(550, smtp.EnhancedCode{5, 1, 1}, "<"+to+">: Recipient address rejected: User unknown in local recipient table")
		case strings.HasPrefix(to, "full@") && full.Load():
			return smtptest.Reply(452, smtp.EnhancedCode{4, 2, 2}, "<"+to+">: Recipient address rejected: mailbox is over quota")
		}
		return nil
	})
	up.OnData(func(m smtptest.Message) error {
		if slices.Contains(m.To, "filtered@example.org") {
			return smtptest.Reply(550, smtp.EnhancedCode{5, 1, 1}, "User unknown")
		}
		return nil
	})
	rl := start(t, cfg)
	id := sendTo(t, rl.r.SMTPAddr().String(), []string{"gone@example.net", "full@example.net", "ok@example.net"}, "", "x\r\n")
	verdicts := func(rs []outcome.Recipient) string {
		var s []string
		for _, r := range rs {
			s = append(s, fmt.Sprintf("%s %s %q", r.Address, r.Status, r.Verdict))
		}
		return strings.Join(s, ", ")
	}
	m := waitAttempt(t, rl.client, id)
	if got, want := verdicts(m.Recipients), `gone@example.net failed "hard", full@example.net pending "soft", ok@example.net sent ""`; got != want {
		t.Errorf("after the first attempt: %s, want %s", got, want)
	}

	full.Store(false)
	waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	want := `gone@example.net failed "hard", full@example.net sent "", ok@example.net sent ""`
	sent := waitEvents(t, out, id, "SENT", 1)[0]
	if got := verdicts(sent.Recipients); got != want {
		t.Errorf("the plugin was told %s, want %s", got, want)
	}

	filtered := sendTo(t, rl.r.SMTPAddr().String(), []string{"filtered@example.org"}, "", "x\r\n")
	m = waitStatus(t, rl.client, filtered, "FAILED-ACKNOWLEDGED")
	if got, want := verdicts(m.Recipients), `filtered@example.org failed "soft"`; got != want {
		t.Errorf("refused at the end of DATA: %s, want %s", got, want)
	}
}
