package relay_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/genropy/postino/internal/testrig/dnstest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
)

// TestDeliveryDNS: DNS's word that a domain does not exist fails its
// recipients only once a second server or the same answer after
// delivery.dns.confirm_after confirms it, and they wait meanwhile; a
// domain whose lookup fails waits too, and leaves the relay ready, while
// resolvers that fail, or deny everything, are reported (/readyz degraded
// under dns, a WARN, postino_dns_up 0) until they answer again.
func TestDeliveryDNS(t *testing.T) {
	port := smtptest.SharedPort(t, "127.0.0.2")
	mx := smtptest.Start(t, smtptest.Options{Addr: fmt.Sprintf("127.0.0.2:%d", port)})
	working := dnstest.Zone{Records: []string{
		". IN NS a.root.test.",
		"live.example. IN MX 10 mx.live.example.", "mx.live.example. IN A 127.0.0.2",
	}, Rcodes: map[string]int{"lame.example.": dns.RcodeServerFailure}}
	failing := dnstest.Zone{Rcode: dns.RcodeServerFailure}
	denying := dnstest.Zone{} // NXDOMAIN for every name, the root's too
	tests := []struct {
		name         string
		zones        []dnstest.Zone // a server each
		confirmAfter time.Duration
		rcpt         string
		degraded     bool           // after the first attempt
		fix          []dnstest.Zone // what the servers answer after the first attempt
		status       string         // in the end; READY: still waiting after 3 attempts
		code         string         // the recipient's in the end
		says         string         // in its text
		deferred     string         // in the history's first deferral
	}{
		{name: "no such domain waits", zones: []dnstest.Zone{working}, confirmAfter: time.Hour, rcpt: "a@nx.example",
			status: "READY", code: "451 4.4.3", deferred: "DNS says domain nx.example does not exist"},
		{name: "confirmed by time", zones: []dnstest.Zone{working}, confirmAfter: time.Millisecond, rcpt: "a@nx.example",
			status: "FAILED-ACKNOWLEDGED", code: "550 5.1.2", says: "; DNS said so at ", deferred: "451 4.4.3 DNS says domain nx.example does not exist"},
		{name: "confirmed by a second server", zones: []dnstest.Zone{working, failing}, confirmAfter: time.Hour, rcpt: "a@nx.example",
			fix: []dnstest.Zone{working, working}, status: "FAILED-ACKNOWLEDGED", code: "550 5.1.2", says: " says so too",
			deferred: "confirms it: the message waits"},
		{name: "the domain's lookup fails", zones: []dnstest.Zone{working}, confirmAfter: time.Millisecond, rcpt: "a@lame.example",
			status: "READY", code: "451 4.4.1", deferred: "SERVFAIL"},
		{name: "resolvers fail", zones: []dnstest.Zone{failing}, confirmAfter: time.Millisecond, rcpt: "a@live.example",
			degraded: true, fix: []dnstest.Zone{working}, status: "SENT-ACKNOWLEDGED", code: "250 ", deferred: "SERVFAIL"},
		{name: "resolvers deny everything", zones: []dnstest.Zone{denying}, confirmAfter: time.Millisecond, rcpt: "a@live.example",
			degraded: true, status: "READY", code: "451 4.4.3", deferred: "DNS says domain live.example does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var servers []*dnstest.Server
			cfg, _ := testConfig(t)
			cfg.Routes.Default.Smarthost = ""
			cfg.Delivery.MXPort = port
			for _, z := range tt.zones {
				s := dnstest.Start(t, z)
				servers = append(servers, s)
				cfg.Delivery.DNS.Servers = append(cfg.Delivery.DNS.Servers, s.Addr)
			}
			cfg.Delivery.DNS.ConfirmAfter = relay.Duration(tt.confirmAfter)
			fastRetry(&cfg)
			rl, logs := startLogging(t, cfg)
			id := sendTo(t, rl.r.SMTPAddr().String(), []string{tt.rcpt}, "", "x\r\n")
			waitMessage(t, rl.client, id, func(m admin.Message) bool { return m.Attempts >= 1 })

			if tt.degraded {
				check := waitReady(t, rl, "degraded").Checks["dns"]
				if !strings.Contains(check, "the resolvers cannot answer the root zone's NS question") {
					t.Errorf("/readyz dns: %q", check)
				}
				scrapeUntil(t, rl, "postino_dns_up 0")
			}
			for i, z := range tt.fix {
				servers[i].Set(t, z)
			}
			var m admin.Message
			if tt.status == "READY" {
				m = waitMessage(t, rl.client, id, func(m admin.Message) bool { return m.Attempts >= 3 && m.Status == "READY" })
			} else {
				m = waitStatus(t, rl.client, id, tt.status)
			}
			r := recipient(m, tt.rcpt)
			if got := fmt.Sprintf("%d %s", r.Code, r.EnhancedCode); !strings.HasPrefix(got, tt.code) || !strings.Contains(r.Text, tt.says) {
				t.Errorf("recipient %+v, want %s saying %q", r, tt.code, tt.says)
			}
			if h := firstDeferral(m); !strings.Contains(h, tt.deferred) {
				t.Errorf("first deferral %q, want it to say %q%s", h, tt.deferred, historyText(m))
			}

			failingLines := len(logLines(logs, "level=WARN", "DNS resolution failing"))
			if !tt.degraded {
				if ready := waitReady(t, rl, "ready"); ready.Checks["dns"] != "ok" || failingLines != 0 {
					t.Errorf("one domain's trouble was reported as the resolvers': %+v\n%s", ready, logs)
				}
				return
			}
			if failingLines != 1 {
				t.Errorf("want one WARN that resolution fails:\n%s", logs)
			}
			if tt.fix != nil {
				waitReady(t, rl, "ready")
				scrapeUntil(t, rl, "postino_dns_up 1")
				if len(logLines(logs, "level=WARN", "DNS resolution works again")) != 1 {
					t.Errorf("want one WARN that resolution works again:\n%s", logs)
				}
				if len(mx.Messages()) == 0 {
					t.Error("the MX host got nothing")
				}
			}
		})
	}
}

// firstDeferral is the reason of m's first deferral, or empty.
func firstDeferral(m admin.Message) string {
	for _, h := range m.History {
		if strings.HasPrefix(h.Reason, "deferred:") {
			return h.Reason
		}
	}
	return ""
}
