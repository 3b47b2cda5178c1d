package delivery

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/dnstest"
	"github.com/genropy/postino/relay/resolver"
)

func TestMXHosts(t *testing.T) {
	srv := dnstest.Start(t, dnstest.Zone{Records: []string{
		"a.example. IN MX 30 c.mx.", "a.example. IN MX 10 a.mx.", "a.example. IN MX 20 b.mx.",
		"null.example. IN MX 0 .",
		"plain.example. IN A 192.0.2.1",
		"txt.example. IN TXT hello",
	}, Rcodes: map[string]int{"broken.example.": dns.RcodeServerFailure}})
	res := resolver.New([]string{srv.Addr}, resolver.Options{Timeout: 5 * time.Second})
	tests := []struct {
		domain    string
		hosts     string
		verdict   string
		noDomain  bool
		temporary bool
	}{
		{domain: "a.example", hosts: "a.mx b.mx c.mx"},
		{domain: "plain.example", hosts: "plain.example"},
		{domain: "null.example", verdict: "556 5.1.10"},
		{domain: "none.example", noDomain: true},
		{domain: "txt.example", noDomain: true},
		{domain: "broken.example", temporary: true},
		{domain: "[192.0.2.7]", hosts: "192.0.2.7"},
		{domain: "[IPv6:2001:db8::1]", hosts: "2001:db8::1"},
	}
	for _, tt := range tests {
		t.Run(tt.domain, func(t *testing.T) {
			hosts, _, v, err := mxHosts(context.Background(), res, tt.domain)
			var nd *noDomain
			switch {
			case tt.noDomain:
				if !errors.As(err, &nd) || nd.domain != tt.domain || nd.confirmedBy != "" {
					t.Errorf("%v %v, want a *noDomain, unconfirmed", v, err)
				}
				return
			case tt.temporary:
				if err == nil || v != nil || errors.As(err, &nd) || !strings.Contains(err.Error(), "SERVFAIL") {
					t.Errorf("%v %v: a DNS failure must be temporary", v, err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if got := strings.Join(hosts, " "); got != tt.hosts {
				t.Errorf("hosts %q, want %q", got, tt.hosts)
			}
			if tt.verdict != "" && (v == nil || !strings.HasPrefix(v.String(), tt.verdict)) {
				t.Errorf("verdict %v, want %s", v, tt.verdict)
			}
		})
	}
}

func TestChooseRoute(t *testing.T) {
	rs, err := NewRoutes([]Route{
		{Name: DefaultRoute, MaxConnections: 1},
		{Name: "billing", Smarthost: "b.example:25", MaxConnections: 1},
		{Name: "partner", Smarthost: "p.example:25", MaxConnections: 1},
		{Name: "app", Smarthost: "a.example:25", MaxConnections: 1},
	}, []Rule{
		{Sender: "billing@example.com", Route: "billing"},
		{Domain: "partner.example", Route: "partner"},
		{AuthUser: "app", Domain: "example.com", Route: "app"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		sender, user, want string
	}{
		{"Billing@Example.com", "", "billing"},
		{"x@partner.example", "", "partner"},
		// A quoted local part holding an '@': the domain is after the last.
		{"x@partner.example@other.example", "", DefaultRoute},
		{"x@other.example@partner.example", "", "partner"},
		{"x@example.com", "app", "app"},
		{"x@example.com", "other", DefaultRoute},
		{"", "", DefaultRoute},
	} {
		m := &backends.Message{Envelope: backends.Envelope{Sender: tt.sender, AuthUser: tt.user}}
		if got, _ := rs.Choose(m); got != tt.want {
			t.Errorf("%s/%s: %s, want %s", tt.sender, tt.user, got, tt.want)
		}
	}
	for _, bad := range []struct {
		routes []Route
		rules  []Rule
		want   string
	}{
		{[]Route{{Name: "x", MaxConnections: 1}}, nil, "default"},
		{[]Route{{Name: DefaultRoute, MaxConnections: 1}}, []Rule{{Route: DefaultRoute}}, "matches nothing"},
		{[]Route{{Name: DefaultRoute, MaxConnections: 1}}, []Rule{{Sender: "a@b", Route: "nope"}}, "does not exist"},
		{[]Route{{Name: DefaultRoute, Smarthost: "h:25", Username: "u", MaxConnections: 1}}, nil, "in clear"},
		{[]Route{{Name: DefaultRoute, Smarthost: "h:25", Username: "u", TLS: TLSOpportunistic, MaxConnections: 1}}, nil,
			"AUTH to h:25 with tls opportunistic would send the password in clear"},
		{[]Route{{Name: DefaultRoute, Smarthost: "h:25", TLS: "maybe", MaxConnections: 1}}, nil,
			`route default: tls "maybe": use none, opportunistic, starttls or tls`},
		{[]Route{{Name: DefaultRoute, TLS: "maybe", MaxConnections: 1}}, nil, `route default: tls "maybe": use none, opportunistic, starttls or tls`},
		{[]Route{{Name: DefaultRoute, TLS: TLSStartTLS, MaxConnections: 1}}, nil, "tls starttls applies to a smarthost"},
	} {
		if _, err := NewRoutes(bad.routes, bad.rules); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("NewRoutes: %v, want %q", err, bad.want)
		}
	}
}

// TestTLSModes: a smarthost takes every mode, none when it gives none; MX
// delivery takes opportunistic, which it uses when it is given none.
func TestTLSModes(t *testing.T) {
	for _, mode := range append(TLSModes(), "") {
		r := Route{Name: DefaultRoute, Smarthost: "h:25", TLS: mode, MaxConnections: 1}
		if err := r.prepare(); err != nil || r.TLS != cmp.Or(mode, TLSNone) {
			t.Errorf("smarthost with tls %q: %v, prepared as %q", mode, err, r.TLS)
		}
	}
	for _, mode := range []string{"", TLSOpportunistic} {
		r := Route{Name: DefaultRoute, TLS: mode, MaxConnections: 1}
		if err := r.prepare(); err != nil || r.TLS != TLSOpportunistic {
			t.Errorf("MX delivery with tls %q: %v, prepared as %q", mode, err, r.TLS)
		}
	}
	if got := TLSModeList(); got != "none, opportunistic, starttls or tls" {
		t.Errorf("TLSModeList %q", got)
	}
}

// scripted is an upstream that answers each line with the next reply of a
// script, and records what it was sent.
func scripted(t *testing.T, pipelining bool, replies map[string]string) (string, chan []string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	got := make(chan []string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		var lines []string
		defer func() { got <- lines }()
		w := bufio.NewWriter(c)
		r := bufio.NewReader(c)
		w.WriteString("220 scripted ESMTP\r\n")
		w.Flush()
		inData := false
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\r\n")
			lines = append(lines, line)
			if inData {
				if line == "." {
					inData = false
					w.WriteString(replies["."] + "\r\n")
				}
			} else {
				verb := strings.ToUpper(strings.Fields(line + " x")[0])
				switch verb {
				case "EHLO":
					w.WriteString("250-scripted\r\n250-SIZE 100000\r\n")
					if pipelining {
						w.WriteString("250-PIPELINING\r\n")
					}
					w.WriteString("250 8BITMIME\r\n")
				case "DATA":
					rep := replies["DATA"]
					if strings.HasPrefix(rep, "354") {
						inData = true
					}
					w.WriteString(rep + "\r\n")
				case "QUIT":
					w.WriteString("221 bye\r\n")
					w.Flush()
					return
				default:
					rep, ok := replies[line]
					if !ok {
						rep = "250 2.0.0 ok"
					}
					w.WriteString(rep + "\r\n")
				}
			}
			if r.Buffered() == 0 {
				w.Flush()
			}
		}
	}()
	return l.Addr().String(), got
}

func TestClientTransaction(t *testing.T) {
	for _, pipelining := range []bool{true, false} {
		name := "sequential"
		if pipelining {
			name = "pipelined"
		}
		t.Run(name, func(t *testing.T) {
			addr, got := scripted(t, pipelining, map[string]string{
				"RCPT TO:<bad@example.net>":  "550-5.1.1 no such user\r\n550 5.1.1 try another",
				"RCPT TO:<busy@example.net>": "452 4.2.2 mailbox full",
				"DATA":                       "354 go on",
				".":                          "250 2.0.0 queued as X1",
			})
			c, err := dial(context.Background(), addr, "scripted", nil, DefaultTimeouts())
			if err != nil {
				t.Fatal(err)
			}
			if err := c.hello("relay.test"); err != nil {
				t.Fatal(err)
			}
			if c.has("PIPELINING") != pipelining || c.ext["SIZE"] != "100000" {
				t.Fatalf("extensions %v", c.ext)
			}
			out, err := c.send(&transaction{from: "app@example.com", size: 20,
				rcpts: []string{"ok@example.net", "bad@example.net", "busy@example.net"},
				body:  strings.NewReader("Subject: x\r\n\r\n.leading dot\r\n")})
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"250 2.0.0 ok", "550 5.1.1 no such user try another", "452 4.2.2 mailbox full"}
			for i, w := range want {
				if out.rcpts[i].String() != w {
					t.Errorf("recipient %d: %q, want %q", i, out.rcpts[i], w)
				}
			}
			if out.data.String() != "250 2.0.0 queued as X1" {
				t.Errorf("data reply %q", out.data)
			}
			c.quit()
			lines := <-got
			joined := strings.Join(lines, "|")
			if !strings.Contains(joined, "MAIL FROM:<app@example.com> SIZE=20|RCPT TO:<ok@example.net>") ||
				!strings.Contains(joined, "|..leading dot|.|QUIT") {
				t.Errorf("the upstream saw %q", joined)
			}
		})
	}
}

// TestClientQuotesLocalParts: a local part that intake received quoted
// goes upstream quoted again, so that what it holds stays in the address.
func TestClientQuotesLocalParts(t *testing.T) {
	addr, got := scripted(t, true, map[string]string{"DATA": "354 go on", ".": "250 2.0.0 ok"})
	c, err := dial(context.Background(), addr, "scripted", nil, DefaultTimeouts())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.hello("relay.test"); err != nil {
		t.Fatal(err)
	}
	_, err = c.send(&transaction{from: "john doe@example.com",
		rcpts: []string{"x> NOTIFY=NEVER@example.net", `a"b\c@example.net`, "first.last+tag@example.net", "josé@exämple.net", ".dot@example.net"},
		body:  strings.NewReader("Subject: x\r\n\r\nx\r\n")})
	if err != nil {
		t.Fatal(err)
	}
	c.quit()
	want := []string{`MAIL FROM:<"john doe"@example.com>`, `RCPT TO:<"x> NOTIFY=NEVER"@example.net>`, `RCPT TO:<"a\"b\\c"@example.net>`,
		"RCPT TO:<first.last+tag@example.net>", "RCPT TO:<josé@exämple.net>", `RCPT TO:<".dot"@example.net>`}
	lines := <-got
	for _, w := range want {
		if !slices.Contains(lines, w) {
			t.Errorf("the upstream was not sent %s: %q", w, lines)
		}
	}
}

func TestClientPrecheck(t *testing.T) {
	addr, got := scripted(t, true, map[string]string{"DATA": "354 go on", ".": "250 ok"})
	c, err := dial(context.Background(), addr, "scripted", nil, DefaultTimeouts())
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	if err := c.hello("relay.test"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		tr   transaction
		want string
	}{
		{transaction{smtputf8: true}, "554 5.6.7"},
		{transaction{size: 200000}, "552 5.3.4"},
		// Control characters never reach a command line: a bare CR could
		// end it at the upstream.
		{transaction{from: "a\rb@example.com"}, "553 5.1.7"},
		{transaction{rcpts: []string{"a@example.net", "us\x00er@example.net"}}, "553 5.1.3"},
		{transaction{rcpts: []string{"a@example.net", "user@example.net\x7f"}}, "553 5.1.3"},
	} {
		if tt.tr.rcpts == nil {
			tt.tr.rcpts = []string{"a@example.net"}
		}
		out, err := c.send(&tt.tr)
		if err != nil || !strings.HasPrefix(out.rcpts[0].String(), tt.want) {
			t.Errorf("%+v: %v %v, want %s", tt.tr, out.rcpts, err, tt.want)
		}
	}
	c.quit()
	if lines := strings.Join(<-got, "|"); strings.Contains(lines, "MAIL") || strings.Contains(lines, "RCPT") {
		t.Errorf("the upstream was sent a transaction: %q", lines)
	}
}

func TestClientLostSession(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, _ := l.Accept()
		c.Write([]byte("220 hi\r\n"))
		r := bufio.NewReader(c)
		r.ReadString('\n')
		c.Write([]byte("250 hi\r\n"))
		r.ReadString('\n') // MAIL, then hang up
		c.Close()
	}()
	c, err := dial(context.Background(), l.Addr().String(), "x", nil, DefaultTimeouts())
	if err != nil {
		t.Fatal(err)
	}
	c.hello("relay.test")
	out, err := c.send(&transaction{from: "a@example.com", rcpts: []string{"b@example.net"}, body: strings.NewReader("x")})
	if err == nil || !c.broken || out.rcpts[0].Code != 0 {
		t.Errorf("a dropped session: %v broken=%v %+v", err, c.broken, out)
	}
	var re *replyError
	if errors.As(err, &re) {
		t.Errorf("a lost connection reported as a reply: %v", err)
	}
}

// TestMXTLS: MX delivery is opportunistic when the route says nothing, and
// in clear when it says none, as an operator may ask of MX hosts whose TLS
// is broken.
func TestMXTLS(t *testing.T) {
	for _, tc := range []struct{ tls, want string }{{"", TLSOpportunistic}, {TLSOpportunistic, TLSOpportunistic}, {TLSNone, TLSNone}} {
		rs, err := NewRoutes([]Route{{Name: DefaultRoute, TLS: tc.tls, MaxConnections: 1}}, nil)
		if err != nil {
			t.Fatalf("MX route with tls %q: %v", tc.tls, err)
		}
		if got := rs.byName[DefaultRoute].TLS; got != tc.want {
			t.Errorf("MX route with tls %q: %q, want %q", tc.tls, got, tc.want)
		}
	}
}
