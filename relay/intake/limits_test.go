package intake_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/textproto"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/relay/intake"
)

// dialFrom connects to addr from the loopback address from (127.0.0.2 and
// the like are other clients to the relay) and returns the first reply.
func dialFrom(t *testing.T, from, addr string) (*raw, string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := &raw{t: t, c: c, r: textproto.NewReader(bufio.NewReader(c))}
	return r, r.reply()
}

// refusedFrom connects from the address from and checks that the relay
// refuses at once, with 421 4.7.0, and closes; it returns the refusal.
func refusedFrom(t *testing.T, from, addr string) string {
	t.Helper()
	start := time.Now()
	r, greeting := dialFrom(t, from, addr)
	if !strings.HasPrefix(greeting, "421 4.7.0 ") {
		t.Fatalf("client %s: greeting %q, want 421 4.7.0", from, greeting)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the refusal took %s", took)
	}
	if _, err := r.r.ReadLine(); !errors.Is(err, io.EOF) {
		t.Errorf("after the refusal: %v, want the connection closed", err)
	}
	return greeting
}

// TestSessionFlood: many clients at once that say nothing hold at most
// MaxSessions; every other client gets 421 4.7.0 at once, none silence.
func TestSessionFlood(t *testing.T) {
	const limit, clients = 20, 200
	e := newEnv(t, func(c *intake.Config) { c.MaxSessions = limit })
	var mu sync.Mutex
	replies := map[string]int{}
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			c, err := net.DialTimeout("tcp", e.addr, 5*time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			t.Cleanup(func() { c.Close() })
			c.SetDeadline(time.Now().Add(10 * time.Second))
			l, err := textproto.NewReader(bufio.NewReader(c)).ReadLine()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				replies["error: "+err.Error()]++
				return
			}
			replies[l[:min(len(l), 9)]]++
		})
	}
	wg.Wait()
	t.Logf("%d clients answered in %s: %v", clients, time.Since(start), replies)
	if replies["220 relay"] != limit || replies["421 4.7.0"] != clients-limit {
		t.Errorf("replies %v, want %d greetings and %d refusals", replies, limit, clients-limit)
	}
}

// TestSessionLimits: a client outside the allowed networks holds at most
// its cap, many of them no more than the sessions not reserved, and the
// apps (127.0.0.1 here) still get in and send meanwhile.
func TestSessionLimits(t *testing.T) {
	e := newEnv(t, func(c *intake.Config) {
		c.AllowNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		c.Accounts = intake.Accounts{"app": "pw"}
		c.AllowInsecureAuth = true
		c.MaxSessions, c.MaxSessionsPerClient, c.ReservedSessions = 7, 2, 2
	})
	for _, from := range []string{"127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"} {
		if _, g := dialFrom(t, from, e.addr); !strings.HasPrefix(g, "220 ") {
			t.Fatalf("client %s: greeting %q", from, g)
		}
	}
	if g := refusedFrom(t, "127.0.0.2", e.addr); !strings.Contains(g, "from your address") {
		t.Errorf("refusal %q does not say the address is over its cap", g)
	}

	// A fifth untrusted session leaves only the reserved ones.
	if _, g := dialFrom(t, "127.0.0.4", e.addr); !strings.HasPrefix(g, "220 ") {
		t.Fatalf("client 127.0.0.4: greeting %q", g)
	}
	refusedFrom(t, "127.0.0.5", e.addr)

	// The app gets the reserved sessions, and sends.
	app := smtpFrom(t, "127.0.0.1", e.addr)
	if err := app.SendMail("app@example.com", []string{"user@example.net"}, strings.NewReader(strings.TrimSuffix(simple, ".\r\n"))); err != nil {
		t.Fatalf("the app, while other clients hold their caps: %v", err)
	}
	if _, g := dialFrom(t, "127.0.0.1", e.addr); !strings.HasPrefix(g, "220 ") {
		t.Fatalf("the app's second session: greeting %q", g)
	}
	refusedFrom(t, "127.0.0.1", e.addr)

	// A session that ends gives its place back.
	app.Close()
	waitGreeting(t, "127.0.0.1", e.addr)
}

func smtpFrom(t *testing.T, from, addr string) *smtp.Client {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c := smtp.NewClient(nc)
	t.Cleanup(func() { c.Close() })
	return c
}

// waitGreeting dials until the relay greets: a closed session is counted
// out once the relay has seen it close.
func waitGreeting(t *testing.T, from, addr string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r, g := dialFrom(t, from, addr)
		if strings.HasPrefix(g, "220 ") {
			return
		}
		r.c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("no greeting after a session ended: %q", g)
		}
	}
}

// trickle sends data one byte at a time, every gap, until the relay
// closes or the test ends.
func trickle(t *testing.T, c net.Conn, data string, gap time.Duration) {
	tick := time.NewTicker(gap)
	t.Cleanup(tick.Stop)
	go func() {
		for i := range len(data) {
			<-tick.C
			if _, err := c.Write([]byte{data[i]}); err != nil {
				return
			}
		}
	}()
}

// TestSlowData: a client that trickles its data, each byte well within
// the read timeout, is cut with 421 once it falls under the minimum rate or
// past the transaction's deadline; its message is not queued, the one
// acknowledged before it stays.
func TestSlowData(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*intake.Config)
		want   string
	}{
		{"rate", func(c *intake.Config) { c.ReadTimeout, c.MinDataRate = time.Second, 1000 }, "421 4.4.2 Data arrived too slowly"},
		{"transaction", func(c *intake.Config) { c.TransactionTimeout = time.Second }, "421 4.4.2 The transaction took longer"},
		{"rate over TLS", func(c *intake.Config) {
			// Each byte trickled is a TLS record of 23.
			c.ReadTimeout, c.MinDataRate, c.TLS = time.Second, 5000, &tls.Config{}
		}, "421 4.4.2 Data arrived too slowly"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.mutate)
			r := dialEHLO(t, e.addr)
			if strings.HasSuffix(tc.name, "TLS") {
				r = startTLS(t, r, e)
			}
			kept := queuedID(t, r.transaction("", simple))

			r.send("MAIL FROM:<app@example.com>\r\nRCPT TO:<user@example.net>\r\nDATA\r\n")
			r.expect("250")
			r.expect("250")
			r.expect("354")
			start := time.Now()
			trickle(t, r.c, "X-Genro-Mail-ID: trickled\r\n"+strings.TrimSuffix(simple, ".\r\n")+strings.Repeat("x", 10000), 20*time.Millisecond)
			got := r.reply()
			took := time.Since(start)
			if !strings.HasPrefix(got, tc.want) {
				t.Fatalf("reply %q, want %q", got, tc.want)
			}
			t.Logf("cut after %s: %s", took, got)
			if took > 5*time.Second {
				t.Errorf("cut after %s", took)
			}
			// Closed: an end of file, or a reset when the relay closed
			// with the trickle's last bytes unread.
			if l, err := r.r.ReadLine(); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("after the cut: %q, %v, want the connection closed", l, err)
			}
			if _, err := e.store.Get(context.Background(), "trickled"); !errors.Is(err, backends.ErrNotFound) {
				t.Errorf("the cut message: %v, want no row", err)
			}
			if _, err := e.store.Get(context.Background(), kept); err != nil {
				t.Errorf("the message acknowledged before: %v", err)
			}
			if n := len(e.spoolFiles(t)); n != 1 {
				t.Errorf("%d spool files, want the acknowledged message's alone", n)
			}
		})
	}
}

// startTLS turns r into a TLS session.
func startTLS(t *testing.T, r *raw, e *env) *raw {
	t.Helper()
	r.send("STARTTLS\r\n")
	r.expect("220")
	c := tls.Client(r.c, e.cert.ClientConfig())
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r = &raw{t: t, c: c, r: textproto.NewReader(bufio.NewReader(c))}
	r.send("EHLO app.local\r\n")
	r.expect("250")
	return r
}

// TestTransactionDeadline: a transaction that dawdles between commands is
// cut at its deadline, not at the read timeout of each command.
func TestTransactionDeadline(t *testing.T) {
	e := newEnv(t, func(c *intake.Config) { c.TransactionTimeout = 500 * time.Millisecond })
	r := dialEHLO(t, e.addr)
	r.send("MAIL FROM:<app@example.com>\r\n")
	r.expect("250")
	start := time.Now()
	// The client says no more: the next reply is the cut.
	got := r.reply()
	if !strings.HasPrefix(got, "421 4.4.2 ") || time.Since(start) > 5*time.Second {
		t.Fatalf("reply %q after %s, want 421 4.4.2 well before the read timeout", got, time.Since(start))
	}
}

// TestBDATCutShort: a BDAT chunk that ends early, because the limits cut
// it or because the client left, is not recorded: go-smtp hands the
// session a chunk cut short as if it were whole.
func TestBDATCutShort(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*intake.Config)
		send   func(t *testing.T, r *raw, rest string)
	}{
		{"rate", func(c *intake.Config) { c.ReadTimeout, c.MinDataRate = time.Second, 1000 }, func(t *testing.T, r *raw, rest string) {
			trickle(t, r.c, rest, 20*time.Millisecond)
			if got := r.reply(); !strings.HasPrefix(got, "421 4.4.2 Data arrived too slowly") {
				t.Errorf("reply %q, want 421 4.4.2", got)
			}
		}},
		{"client gone", nil, func(t *testing.T, r *raw, _ string) { r.c.Close() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.mutate)
			r := dialEHLO(t, e.addr)
			msg := "X-Genro-Mail-ID: cut\r\n" + strings.TrimSuffix(simple, ".\r\n") + strings.Repeat(strings.Repeat("x", 70)+"\r\n", 140)
			r.send("MAIL FROM:<app@example.com>\r\nRCPT TO:<user@example.net>\r\n")
			r.expect("250")
			r.expect("250")
			r.send(fmt.Sprintf("BDAT %d LAST\r\n", len(msg)) + msg[:3000])
			tc.send(t, r, msg[3000:])
			deadline := time.Now().Add(30 * time.Second)
			for e.logs.Count("message refused") == 0 {
				if time.Now().After(deadline) {
					t.Fatalf("the session never ended its transaction:\n%s", e.logs.String())
				}
				time.Sleep(10 * time.Millisecond)
			}
			if m, err := e.store.Get(context.Background(), "cut"); !errors.Is(err, backends.ErrNotFound) {
				t.Errorf("recorded (%v, %v) from a chunk cut short", m, err)
			}
			if n := len(e.spoolFiles(t)); n != 0 {
				t.Errorf("%d spool files left", n)
			}
		})
	}
}
