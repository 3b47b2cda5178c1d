package intake_test

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net/netip"
	"net/textproto"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/relay/intake"
)

// metric is the value of a counter or gauge of reg, summed over the series
// whose labels include those given.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}
				if !found {
					continue series
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// guessing is a server with AUTH in plain text (so that raw sessions can
// use it) and the limits given, for clients outside its allowed networks.
func guessing(t *testing.T, lim intake.AuthLimits) *env {
	return newEnv(t, func(c *intake.Config) {
		c.Accounts = intake.Accounts{"app": "s3cret"}
		c.AllowInsecureAuth = true
		c.AllowNetworks = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		c.AuthLimits = lim
	})
}

// helloFrom opens a raw session from a loopback address of the test's
// choosing, which the server sees as a client of its own, and says EHLO.
func helloFrom(t *testing.T, addr, from string) *raw {
	t.Helper()
	r, greeting := dialFrom(t, from, addr)
	if !strings.HasPrefix(greeting, "220") {
		t.Fatalf("client %s: greeting %q, want 220", from, greeting)
	}
	r.c.SetDeadline(time.Now().Add(20 * time.Second))
	r.send("EHLO app.local\r\n")
	r.expect("250")
	return r
}

func plain(user, password string) string {
	return "AUTH PLAIN " + base64.StdEncoding.EncodeToString([]byte("\x00"+user+"\x00"+password)) + "\r\n"
}

// expectClosed checks that the server ends the session.
func (r *raw) expectClosed() {
	r.t.Helper()
	if l, err := r.r.ReadLine(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		r.t.Fatalf("the session goes on after its last reply: %q, %v", l, err)
	}
}

// TestAuthGuessingInOneSession: a guesser that tries one password after
// another on one connection gets two 535s, then a 421 and the connection
// closed; one line is logged, every failure counted.
func TestAuthGuessingInOneSession(t *testing.T) {
	e := guessing(t, intake.AuthLimits{Delay: time.Millisecond, MaxDelay: 4 * time.Millisecond,
		PerSession: 3, PerClient: 100, Window: time.Hour, Clients: 100})
	r := helloFrom(t, e.addr, "127.0.0.1")
	var replies []string
	for i := 0; i < 300; i++ {
		r.send(plain("app", "guess"+string(rune('a'+i%26))))
		got := r.reply()
		replies = append(replies, got)
		if !strings.HasPrefix(got, "535 5.7.8") {
			break
		}
	}
	if len(replies) != 3 || !strings.HasPrefix(replies[2], "421 4.7.0") {
		t.Fatalf("replies %q, want two 535 and a 421", replies)
	}
	r.expectClosed()
	if n := e.logs.Count("authentication failed"); n != 1 {
		t.Errorf("%d log lines of failures, want 1 for the burst:\n%s", n, e.logs.String())
	}
	if n := metric(t, e.reg, "postino_intake_rejected_total", "reason", "auth"); n != 3 {
		t.Errorf("rejected{auth} = %v, want 3", n)
	}
	if n := metric(t, e.reg, "postino_intake_auth_limited_total", "limit", "session"); n != 1 {
		t.Errorf("auth_limited{session} = %v, want 1", n)
	}
}

// An app of the allowed networks with a stale password does not lock
// out the others of its host: its failures end its sessions but are not
// counted against its address, and the right password keeps working.
func TestAuthFailuresOfApps(t *testing.T) {
	e := newEnv(t, func(c *intake.Config) {
		c.Accounts = intake.Accounts{"app": "s3cret"}
		c.AllowInsecureAuth = true
		c.AuthLimits = intake.AuthLimits{Delay: time.Millisecond, MaxDelay: time.Millisecond,
			PerSession: 2, PerClient: 3, Window: time.Hour, Clients: 100}
	})
	for range 4 {
		r := helloFrom(t, e.addr, "127.0.0.1")
		r.send(plain("app", "stale"))
		r.expect("535 5.7.8")
		r.send(plain("app", "stale"))
		r.expect("421 4.7.0")
		r.expectClosed()
	}
	r := helloFrom(t, e.addr, "127.0.0.1")
	r.send(plain("app", "s3cret"))
	r.expect("235")
	queuedID(t, r.transaction("", simple))
}

// TestAuthGuessingByAddress: an address over its limit is refused AUTH, its
// right password included, and its sessions closed; another address logs
// in and sends meanwhile.
func TestAuthGuessingByAddress(t *testing.T) {
	e := guessing(t, intake.AuthLimits{Delay: time.Millisecond, MaxDelay: time.Millisecond,
		PerSession: 2, PerClient: 5, Window: time.Hour, Clients: 100})
	failures := 0
	for session := 0; session < 5 && failures < 5; session++ {
		r := helloFrom(t, e.addr, "127.0.0.1")
		for {
			r.send(plain("app", "wrong"))
			got := r.reply()
			failures++
			if strings.HasPrefix(got, "421 4.7.0") {
				r.expectClosed()
				break
			}
			if !strings.HasPrefix(got, "535 5.7.8") {
				t.Fatalf("failure %d: %q", failures, got)
			}
		}
	}
	if failures != 5 {
		t.Fatalf("%d failures before the address was refused, want 5", failures)
	}

	r := helloFrom(t, e.addr, "127.0.0.1")
	r.send(plain("app", "s3cret"))
	if got := r.expect("421 4.7.0"); !strings.Contains(got, "from your address: try again after") {
		t.Errorf("reply %q does not say when to try again", got)
	}
	r.expectClosed()

	other := helloFrom(t, e.addr, "127.0.0.2")
	other.send(plain("app", "s3cret"))
	other.expect("235")
	queuedID(t, other.transaction("", simple))

	if n := e.logs.Count("authentication failed"); n != 1 {
		t.Errorf("%d log lines of failures, want 1:\n%s", n, e.logs.String())
	}
	if n := e.logs.Count("reached the limit"); n != 1 {
		t.Errorf("%d log lines of the limit, want 1:\n%s", n, e.logs.String())
	}
	if n := metric(t, e.reg, "postino_intake_auth_limited_total", "limit", "client"); n != 2 {
		t.Errorf("auth_limited{client} = %v, want 2 (the fifth failure, the refused AUTH)", n)
	}
}

// TestAuthFailureIsDelayed: the reply to a wrong password waits, while
// another client logs in and has a message queued; then it comes.
func TestAuthFailureIsDelayed(t *testing.T) {
	e := guessing(t, intake.AuthLimits{Delay: 3 * time.Second, MaxDelay: 3 * time.Second, PerSession: 3})
	guesser := helloFrom(t, e.addr, "127.0.0.1")
	guesser.send(plain("app", "wrong"))

	app := helloFrom(t, e.addr, "127.0.0.2")
	app.send(plain("app", "s3cret"))
	app.expect("235")
	queuedID(t, app.transaction("", simple))

	guesser.c.SetReadDeadline(time.Now())
	if l, err := guesser.r.ReadLine(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the failure was answered before a whole transaction of another client: %q, %v", l, err)
	}
	guesser.c.SetReadDeadline(time.Now().Add(20 * time.Second))
	guesser.r = textproto.NewReader(bufio.NewReader(guesser.c))
	guesser.expect("535 5.7.8")
}

// TestAuthClientTableBounded: failures from more addresses than the table
// holds leave it at its size.
func TestAuthClientTableBounded(t *testing.T) {
	e := guessing(t, intake.AuthLimits{PerSession: 1, PerClient: 5, Window: time.Hour, Clients: 4})
	for i := 1; i <= 12; i++ {
		r := helloFrom(t, e.addr, netip.AddrFrom4([4]byte{127, 0, 1, byte(i)}).String())
		r.send(plain("app", "wrong"))
		r.expect("421 4.7.0")
		if n := metric(t, e.reg, "postino_intake_auth_failing_clients"); n > 4 || n < float64(min(i, 4)) {
			t.Fatalf("after %d addresses the table holds %v, want %d", i, n, min(i, 4))
		}
	}
}

// TestAuthGuessingOverTLS: the session closed for its failures ends with
// the 421 and a TLS close, as a client library sees it.
func TestAuthGuessingOverTLS(t *testing.T) {
	e := newEnv(t, func(c *intake.Config) {
		c.TLS = &tls.Config{}
		c.Accounts = intake.Accounts{"app": "s3cret"}
		c.AllowNetworks = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
		c.AuthLimits = intake.AuthLimits{Delay: time.Millisecond, MaxDelay: time.Millisecond, PerSession: 3}
	})
	c, err := smtp.DialStartTLS(e.addr, e.cert.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var codes []int
	for range 3 {
		err := c.Auth(sasl.NewPlainClient("", "app", "wrong"))
		se, ok := errors.AsType[*smtp.SMTPError](err)
		if !ok {
			t.Fatalf("AUTH: %v", err)
		}
		codes = append(codes, se.Code)
	}
	if fmt.Sprint(codes) != "[535 535 421]" {
		t.Fatalf("replies %v, want [535 535 421]", codes)
	}
	if err := c.Noop(); err == nil {
		t.Fatal("the session goes on after the 421")
	}
}
