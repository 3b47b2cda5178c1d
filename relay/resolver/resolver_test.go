package resolver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/genropy/postino/internal/testrig/dnstest"
)

var zone = dnstest.Zone{Records: []string{
	"pref.example. IN MX 20 mx2.example.",
	"pref.example. IN MX 10 mx1.example.",
	"alias.example. IN CNAME pref.example.",
	"amx.example. IN A 192.0.2.1",
	"mx1.example. IN A 192.0.2.10",
	"mx1.example. IN AAAA 2001:db8::10",
	"null.example. IN MX 0 .",
	". IN NS a.root.example.",
}}

// silent is an address of 127.0.0.1 where no DNS server listens: a
// question to it is refused at once.
func silent(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

func client(servers ...string) *Client {
	return New(servers, Options{Timeout: 5 * time.Second})
}

func TestLookupMX(t *testing.T) {
	srv := dnstest.Start(t, zone)
	c := client(srv.Addr)
	tests := []struct {
		name, want string
		notFound   bool
	}{
		{name: "pref.example", want: "20 mx2.example. 10 mx1.example."},
		{name: "alias.example", want: "20 mx2.example. 10 mx1.example."},
		{name: "null.example", want: "0 ."},
		{name: "amx.example", notFound: true},
		{name: "nx.example", notFound: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mxs, err := c.LookupMX(context.Background(), tt.name)
			var got []string
			for _, mx := range mxs {
				got = append(got, fmt.Sprintf("%d %s", mx.Pref, mx.Host))
			}
			var de *net.DNSError
			if tt.notFound {
				if !errors.As(err, &de) || !de.IsNotFound || de.Temporary() || de.Server != srv.Addr {
					t.Fatalf("%v %v, want a not-found *net.DNSError from %s", got, err, srv.Addr)
				}
				return
			}
			if err != nil || strings.Join(got, " ") != tt.want {
				t.Errorf("%q %v, want %q", got, err, tt.want)
			}
		})
	}
}

// TestLookupServers: the servers are asked in order, passing those that
// fail; an NXDOMAIN is put to another server, which may confirm it.
func TestLookupServers(t *testing.T) {
	good := dnstest.Start(t, zone)
	other := dnstest.Start(t, zone)
	failing := dnstest.Start(t, dnstest.Zone{Rcode: dns.RcodeServerFailure})
	refusing := dnstest.Start(t, dnstest.Zone{Rcode: dns.RcodeRefused})
	empty := dnstest.Start(t, dnstest.Zone{})
	dead := silent(t)
	tests := []struct {
		name      string
		servers   []string
		lookup    string
		server    string // that answered
		nxdomain  bool
		confirmed string
		temporary string // in the error, when no server answered
	}{
		{name: "first answers", servers: []string{good.Addr, failing.Addr}, lookup: "pref.example", server: good.Addr},
		{name: "SERVFAIL passed", servers: []string{failing.Addr, good.Addr}, lookup: "pref.example", server: good.Addr},
		{name: "REFUSED passed", servers: []string{refusing.Addr, good.Addr}, lookup: "pref.example", server: good.Addr},
		{name: "no server passed", servers: []string{dead, good.Addr}, lookup: "pref.example", server: good.Addr},
		{name: "NXDOMAIN of one server", servers: []string{good.Addr}, lookup: "nx.example", server: good.Addr, nxdomain: true},
		{name: "NXDOMAIN confirmed", servers: []string{good.Addr, other.Addr}, lookup: "nx.example", server: good.Addr, nxdomain: true, confirmed: other.Addr},
		{name: "NXDOMAIN confirmed past a failing server", servers: []string{empty.Addr, failing.Addr, good.Addr}, lookup: "nx.example",
			server: empty.Addr, nxdomain: true, confirmed: good.Addr},
		{name: "NXDOMAIN the second does not confirm", servers: []string{good.Addr, failing.Addr}, lookup: "nx.example", server: good.Addr, nxdomain: true},
		{name: "NXDOMAIN of a broken server", servers: []string{empty.Addr, good.Addr}, lookup: "pref.example", server: good.Addr},
		{name: "none answers", servers: []string{failing.Addr, dead}, lookup: "pref.example", temporary: "SERVFAIL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := client(tt.servers...).Lookup(context.Background(), tt.lookup, dns.TypeMX)
			if tt.temporary != "" {
				var de *net.DNSError
				if !errors.As(err, &de) || !de.Temporary() || de.IsNotFound || !strings.Contains(err.Error(), tt.temporary) {
					t.Fatalf("%+v %v, want a temporary *net.DNSError that says %s", a, err, tt.temporary)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.Server != tt.server || a.NXDomain != tt.nxdomain || a.ConfirmedBy != tt.confirmed {
				t.Errorf("answer %+v, want from %s, NXDOMAIN %v, confirmed by %q", a, tt.server, tt.nxdomain, tt.confirmed)
			}
			if !tt.nxdomain && len(a.Records) != 2 {
				t.Errorf("records %v", a.Records)
			}
		})
	}

	// What the typed lookups make of a confirmation.
	_, err := client(good.Addr, other.Addr).LookupIPAddr(context.Background(), "nx.example")
	var c interface{ ConfirmedBy() string }
	var de *net.DNSError
	if !errors.As(err, &de) || !de.IsNotFound || !errors.As(err, &c) || c.ConfirmedBy() != other.Addr {
		t.Errorf("%v, want not found, confirmed by %s", err, other.Addr)
	}
	_, err = client(good.Addr, failing.Addr).LookupMX(context.Background(), "nx.example")
	if !errors.As(err, &de) || !de.IsNotFound || errors.As(err, &c) {
		t.Errorf("%v, want not found, unconfirmed", err)
	}
}

func TestLookupIPAddr(t *testing.T) {
	big := []string{". IN NS a.root.example."}
	for i := range 120 {
		big = append(big, fmt.Sprintf("big.example. IN A 192.0.2.%d", i+1))
	}
	srv := dnstest.Start(t, dnstest.Zone{Records: append(big, zone.Records...)})
	c := client(srv.Addr)
	tests := []struct {
		host string
		want int
		tcp  bool // the answer did not fit a datagram
	}{
		{host: "mx1.example", want: 2},
		{host: "amx.example", want: 1},
		{host: "big.example", want: 120, tcp: true},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			ips, err := c.LookupIPAddr(context.Background(), tt.host)
			if err != nil || len(ips) != tt.want {
				t.Fatalf("%v %v, want %d addresses", ips, err, tt.want)
			}
			if ips[0].IP.To4() == nil {
				t.Errorf("%v: IPv4 comes first", ips)
			}
			var nets []string
			for _, q := range srv.Queries() {
				if q.Name == tt.host+"." && q.Type == dns.TypeA {
					nets = append(nets, q.Net)
				}
			}
			want := "udp"
			if tt.tcp {
				want = "udp tcp"
			}
			if strings.Join(nets, " ") != want {
				t.Errorf("A questions over %v, want %s", nets, want)
			}
		})
	}
}

// TestAuthenticated: an answer's AD bit is read, and believed only of
// servers said to validate, which are asked with DO and AD.
func TestAuthenticated(t *testing.T) {
	tests := []struct {
		name       string
		ad         bool
		validating bool
		want       bool
	}{
		{"validated", true, true, true},
		{"not validated", false, true, false},
		{"AD from a server not said to validate", true, false, false},
		{"neither", false, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			z := zone
			z.AD = tt.ad
			srv := dnstest.Start(t, z)
			c := New([]string{srv.Addr}, Options{Timeout: 5 * time.Second, Validating: tt.validating})
			for _, name := range []string{"pref.example", "nx.example"} {
				a, err := c.Lookup(context.Background(), name, dns.TypeMX)
				if err != nil {
					t.Fatal(err)
				}
				if a.Authenticated != tt.want {
					t.Errorf("%s: authenticated %v, want %v", name, a.Authenticated, tt.want)
				}
			}
			for _, q := range srv.Queries() {
				if q.DO != tt.validating || q.AD != tt.validating {
					t.Errorf("question %+v: DO and AD set only to validating servers", q)
				}
			}
		})
	}
}

// TestLookupTXT: a record's strings are joined, as net.Resolver joins
// them; a name without TXT records is not found.
func TestLookupTXT(t *testing.T) {
	srv := dnstest.Start(t, dnstest.Zone{Records: []string{
		`_mta-sts.example. IN TXT "v=STSv1; " "id=2026a"`,
		`_smtp._tls.example. IN TXT "v=TLSRPTv1; rua=mailto:tls@example"`,
		"example. IN A 192.0.2.1",
	}})
	c := client(srv.Addr)
	got, err := c.LookupTXT(context.Background(), "_mta-sts.example")
	if err != nil || strings.Join(got, "|") != "v=STSv1; id=2026a" {
		t.Errorf("_mta-sts.example: %q %v", got, err)
	}
	var de *net.DNSError
	for _, name := range []string{"example", "nx.example"} {
		if _, err := c.LookupTXT(context.Background(), name); !errors.As(err, &de) || !de.IsNotFound {
			t.Errorf("%s: %v, want a not-found *net.DNSError", name, err)
		}
	}
}
