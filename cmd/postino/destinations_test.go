package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/internal/testrig/dnstest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
	"github.com/genropy/postino/relay/delivery"
	"github.com/genropy/postino/relay/relaytest"
)

// TestDestinationsCommands: destinations list and show give a site of MX
// delivery, its domains, limits and last replies; suspend holds its mail
// until resume, and says what it needs.
func TestDestinationsCommands(t *testing.T) {
	port := smtptest.SharedPort(t, "127.0.0.2")
	mx := smtptest.Start(t, smtptest.Options{Addr: "127.0.0.2:" + strconv.Itoa(port)})
	zone := dnstest.Zone{Records: []string{". IN NS a.root.test.", "example.net. IN MX 10 mx.site.test.", "mx.site.test. IN A 127.0.0.2"}}
	cfg := relay.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.SMTP.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Intake.Poll = relay.Duration(50 * time.Millisecond)
	cfg.Delivery.Poll = relay.Duration(50 * time.Millisecond)
	cfg.Delivery.MXPort = port
	cfg.Delivery.DNS.Servers = []string{dnstest.Start(t, zone).Addr}
	r, _ := relaytest.Start(t, cfg)
	addr := r.AdminAddr().String()
	sendOne(t, r.SMTPAddr().String(), "X-Genro-Mail-ID: dest-1\r\n")
	waitFor(t, time.Minute, func() string { return "no message at the MX host" }, func() bool { return len(mx.Messages()) == 1 })

	var list admin.SiteList
	cliJSON(t, &list, "destinations", "list", "--json", "--admin", addr)
	if len(list.Sites) != 1 {
		t.Fatalf("destinations list: %+v", list)
	}
	s := list.Sites[0]
	if s.Key != "mx.site.test" || s.State != delivery.SiteUp || strings.Join(s.Domains, " ") != "example.net" || s.Limits.Sessions == 0 ||
		len(s.Replies) == 0 || !strings.HasPrefix(s.Replies[len(s.Replies)-1].Reply, "250") {
		t.Errorf("the site: %+v", s)
	}
	if out, _, code := cli(t, "destinations", "list", "--admin", addr); code != 0 || !strings.Contains(out, "mx.site.test") || !strings.Contains(out, "up") {
		t.Errorf("destinations list: %d\n%s", code, out)
	}
	out, _, code := cli(t, "destinations", "show", "mx.site.test", "--admin", addr)
	if code != 0 || !strings.Contains(out, "Domains:") || !strings.Contains(out, "example.net") || !strings.Contains(out, "Last replies:") {
		t.Errorf("destinations show: %d\n%s", code, out)
	}

	if _, errOut, code := cli(t, "destinations", "suspend", "mx.site.test", "--admin", addr); code == 0 || !strings.Contains(errOut, "--for") {
		t.Errorf("suspend without --for: %d %s", code, errOut)
	}
	if _, errOut, code := cli(t, "destinations", "show", "mx.nowhere.test", "--admin", addr); code == 0 || !strings.Contains(errOut, "no site") {
		t.Errorf("show of an unknown site: %d %s", code, errOut)
	}
	out, _, code = cli(t, "destinations", "suspend", "mx.site.test", "--for", "1h", "--admin", addr)
	if code != 0 || !strings.Contains(out, "suspended until") {
		t.Fatalf("destinations suspend: %d %s", code, out)
	}
	var shown delivery.SiteView
	cliJSON(t, &shown, "destinations", "show", "mx.site.test", "--json", "--admin", addr)
	if shown.State != delivery.SiteSuspended || shown.Until == nil || time.Until(*shown.Until) < 50*time.Minute || !strings.Contains(shown.Why, "by operator") {
		t.Errorf("a suspended site: %+v", shown)
	}
	// Its mail waits, handed back without a try.
	sendOne(t, r.SMTPAddr().String(), "X-Genro-Mail-ID: dest-2\r\n")
	waitFor(t, time.Minute, func() string { return "dest-2 was not handed back for its suspended site" }, func() bool {
		var m map[string]any
		cliJSON(t, &m, "queue", "show", "dest-2", "--json", "--admin", addr)
		hist, _ := m["history"].([]any)
		for _, h := range hist {
			if strings.Contains(h.(map[string]any)["reason"].(string), "is suspended by operator") {
				return true
			}
		}
		return false
	})
	if n := len(mx.Messages()); n != 1 {
		t.Errorf("the suspended site got %d messages", n)
	}
	if out, _, code := cli(t, "destinations", "resume", "mx.site.test", "--admin", addr); code != 0 || !strings.Contains(out, "resumed") {
		t.Errorf("destinations resume: %d %s", code, out)
	}
	cliJSON(t, &shown, "destinations", "show", "mx.site.test", "--json", "--admin", addr)
	if shown.State != delivery.SiteUp {
		t.Errorf("a resumed site: %+v", shown)
	}
}
