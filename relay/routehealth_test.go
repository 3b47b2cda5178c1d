package relay_test

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/genropy/postino/internal/testrig/dnstest"
	"github.com/genropy/postino/internal/testrig/logtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay/admin"
)

// closedPort is an address on 127.0.0.1 where nothing listens: a
// connection to it is refused at once.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// logLines are the lines of the log that hold every one of subs.
func logLines(logs *logtest.Buffer, subs ...string) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		all := true
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			out = append(out, l)
		}
	}
	return out
}

// TestRouteDown: a smarthost that takes no connection is reported once its
// last delivery.route_down_after attempts failed (one WARN, /readyz
// degraded naming the route, postino_route_up 0), and each deferral is a
// WARN that says why and when the message goes again; once the smarthost
// listens, the next attempt delivers and the route is reported up again,
// once.
func TestRouteDown(t *testing.T) {
	const after = 3
	cfg, _ := testConfig(t)
	addr := closedPort(t)
	cfg.Routes.Default.Smarthost = addr
	cfg.Delivery.RouteDownAfter = after
	fastRetry(&cfg)
	rl, logs := startLogging(t, cfg)

	id := send(t, rl.r.SMTPAddr().String(), "")
	ready := waitReady(t, rl, "degraded")
	check := ready.Checks["route default"]
	for _, want := range []string{"connection attempts to smarthost " + addr + " failed", "connection refused"} {
		if !strings.Contains(check, want) {
			t.Errorf("/readyz route default: %q, want it to say %q (%+v)", check, want, ready)
		}
	}
	scrapeUntil(t, rl, `postino_route_up{route="default"} 0`)
	// Failures while the route is down say nothing more of the route.
	waitMessage(t, rl.client, id, func(m admin.Message) bool { return m.Attempts >= after+2 })
	down := logLines(logs, "level=WARN", "route down")
	if len(down) != 1 || !strings.Contains(down[0], "route=default smarthost="+addr) ||
		!strings.Contains(down[0], fmt.Sprintf("failed_attempts=%d", after)) || !strings.Contains(down[0], "connection refused") {
		t.Errorf("want one WARN that the route is down, naming it, its smarthost, the attempts and the error:\n%s", strings.Join(down, "\n"))
	}
	deferred := logLines(logs, "level=WARN msg=deferred id="+id)
	if len(deferred) < after || !strings.Contains(deferred[0], "connection refused") || !strings.Contains(deferred[0], "next_attempt=") {
		t.Errorf("deferrals must be WARN lines with the error and the next attempt:\n%s", logs.String())
	}

	up := smtptest.Start(t, smtptest.Options{Addr: addr})
	waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	if got := up.Messages(); len(got) != 1 {
		t.Errorf("the smarthost got %d messages", len(got))
	}
	ready = waitReady(t, rl, "ready")
	if ready.Checks["route default"] != "ok" {
		t.Errorf("/readyz %+v", ready)
	}
	if body := scrape(t, rl); !strings.Contains(body, `postino_route_up{route="default"} 1`) {
		t.Errorf("the route is not up:\n%s", grep(body, "route_up"))
	}
	back := logLines(logs, "route up again", "route=default smarthost="+addr)
	if len(back) != 1 || len(logLines(logs, "route down")) != 1 {
		t.Errorf("want one line that the route is back, and still one that it was down:\n%s", logs.String())
	}
}

// TestMXRouteDown: on an MX route, one site whose hosts take no
// connection is that site's trouble: the site is down, its mail waits for
// its probes, and the route stays up; once the failures in a row reach a
// second site, the route is down.
func TestMXRouteDown(t *testing.T) {
	const after = 3
	_, port, err := net.SplitHostPort(closedPort(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := testConfig(t)
	cfg.Routes.Default.Smarthost = ""
	dns := dnstest.Start(t, dnstest.Zone{Records: []string{
		". IN NS a.root.test.",
		"a.example. IN MX 10 mx.a.example.", "b.example. IN MX 10 mx.b.example.",
		"mx.a.example. IN A 127.0.0.1", "mx.b.example. IN A 127.0.0.1",
	}})
	cfg.Delivery.DNS.Servers = []string{dns.Addr}
	fmt.Sscan(port, &cfg.Delivery.MXPort)
	cfg.Delivery.RouteDownAfter = after
	fastRetry(&cfg)
	rl, logs := startLogging(t, cfg)
	smtpAddr := rl.r.SMTPAddr().String()

	a := sendTo(t, smtpAddr, []string{"user@a.example"}, "", "x\r\n")
	// Its site is down after as many attempts; its mail waits for probes.
	scrapeUntil(t, rl, `postino_sites_down{site="mx.a.example"} 1`)
	if m := waitMessage(t, rl.client, a, func(m admin.Message) bool { return m.Attempts >= after }); m.Attempts != after {
		t.Errorf("a message to a down site was tried %d times, want %d: the probe waits its interval", m.Attempts, after)
	}
	if ready := waitReady(t, rl, "ready"); ready.Checks["route default"] != "ok" {
		t.Errorf("one domain down made the route down: %+v", ready)
	}
	b := sendTo(t, smtpAddr, []string{"user@b.example"}, "", "x\r\n")
	// Its first failure takes the route down.
	waitMessage(t, rl.client, b, func(m admin.Message) bool { return m.Attempts >= 1 })
	check := waitReady(t, rl, "degraded").Checks["route default"]
	if !strings.Contains(check, "connection attempts to the MX hosts of its recipients' domains failed") || !strings.Contains(check, "connection refused") {
		t.Errorf("/readyz route default: %q", check)
	}
	scrapeUntil(t, rl, `postino_route_up{route="default"} 0`)
	if down := logLines(logs, "level=WARN", "route down", "route=default upstream=\"MX hosts\""); len(down) != 1 {
		t.Errorf("want one WARN that the route is down:\n%s", logs.String())
	}
}
