package delivery

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/genropy/postino/internal/testrig/dnstest"
	"github.com/genropy/postino/internal/testrig/logtest"
	"github.com/genropy/postino/relay/resolver"
)

// working is a resolver's view of DNS: the root, and live.example, whose
// MX host has an address.
var working = dnstest.Zone{Records: []string{
	". IN NS a.root.example.",
	"live.example. IN MX 10 mx.live.example.",
	"mx.live.example. IN A 192.0.2.1",
}, Rcodes: map[string]int{"lame.example.": dns.RcodeServerFailure}}

// lookup is what r.hosts made of a lookup of domain: the hosts, the
// verdict's codes, or "error".
func lookup(r *resolution, domain string) string {
	hosts, _, rep, err := r.hosts(context.Background(), domain)
	switch {
	case err != nil:
		return "error"
	case rep != nil:
		return fmt.Sprintf("%d %s", rep.Code, rep.Enhanced)
	}
	return strings.Join(hosts, " ")
}

// TestResolution: a "no such domain" answer is final once a second server
// or the same answer after confirmAfter confirms it, and neither counts
// while the resolvers cannot answer the root's question; resolution is
// failing only then, not for one domain's trouble.
func TestResolution(t *testing.T) {
	ok := dnstest.Start(t, working)
	ok2 := dnstest.Start(t, working)
	failing := dnstest.Start(t, dnstest.Zone{Rcode: dns.RcodeServerFailure})
	denying := dnstest.Start(t, dnstest.Zone{}) // NXDOMAIN for every name, the root's too
	denying2 := dnstest.Start(t, dnstest.Zone{})
	const now, later = time.Nanosecond, time.Hour // confirmAfter
	tests := []struct {
		name         string
		servers      []*dnstest.Server
		confirmAfter time.Duration
		lookups      string // domains looked up in turn
		want         string // outcome of each, comma separated
		failing      bool
	}{
		{name: "answered", servers: []*dnstest.Server{ok}, confirmAfter: later, lookups: "live.example", want: "mx.live.example"},
		{name: "confirmed by a second server", servers: []*dnstest.Server{ok, ok2}, confirmAfter: later,
			lookups: "nx.example", want: "550 5.1.2"},
		{name: "a second server that fails does not confirm", servers: []*dnstest.Server{ok, failing}, confirmAfter: later,
			lookups: "nx.example nx.example", want: "451 4.4.3,451 4.4.3"},
		{name: "not yet confirmed by time", servers: []*dnstest.Server{ok}, confirmAfter: later,
			lookups: "nx.example nx.example", want: "451 4.4.3,451 4.4.3"},
		{name: "confirmed by time", servers: []*dnstest.Server{ok}, confirmAfter: now,
			lookups: "nx.example nx.example nx.example", want: "451 4.4.3,550 5.1.2,550 5.1.2"},
		{name: "each domain confirmed on its own", servers: []*dnstest.Server{ok}, confirmAfter: now,
			lookups: "nx.example other.example", want: "451 4.4.3,451 4.4.3"},
		{name: "one domain fails", servers: []*dnstest.Server{ok}, confirmAfter: later,
			lookups: "lame.example lame.example", want: "error,error"},
		{name: "resolvers fail", servers: []*dnstest.Server{failing}, confirmAfter: now,
			lookups: "live.example", want: "error", failing: true},
		{name: "resolvers deny everything", servers: []*dnstest.Server{denying}, confirmAfter: now,
			lookups: "live.example live.example", want: "451 4.4.3,451 4.4.3", failing: true},
		{name: "two servers deny everything", servers: []*dnstest.Server{denying, denying2}, confirmAfter: later,
			lookups: "live.example", want: "451 4.4.3", failing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var addrs []string
			for _, s := range tt.servers {
				addrs = append(addrs, s.Addr)
			}
			log, logs := logtest.Logger()
			m := NewMetrics(prometheus.NewRegistry())
			r := newResolution(resolver.New(addrs, resolver.Options{Timeout: 5 * time.Second}), tt.confirmAfter, log, m)
			var got []string
			for _, d := range strings.Fields(tt.lookups) {
				got = append(got, lookup(r, d))
			}
			if g := strings.Join(got, ","); g != tt.want {
				t.Errorf("outcomes %s, want %s", g, tt.want)
			}
			err := r.err()
			if (err != nil) != tt.failing || err != nil && !strings.Contains(err.Error(), "the root zone's NS question") {
				t.Errorf("err %v, want failing %v", err, tt.failing)
			}
			wantUp, downs := 1.0, 0
			if tt.failing {
				wantUp, downs = 0, 1
			}
			if got := testutil.ToFloat64(m.dnsUp); got != wantUp {
				t.Errorf("postino_dns_up %v, want %v", got, wantUp)
			}
			if n := logs.Count(`level=WARN msg="delivery: DNS resolution failing`); n != downs {
				t.Errorf("%d WARNs that resolution fails, want %d:\n%s", n, downs, logs)
			}
		})
	}
}

// TestResolutionRecovers: resolution that failed works again at the first
// lookup answered, and a domain found, in between, forgets that DNS said
// it does not exist.
func TestResolutionRecovers(t *testing.T) {
	srv := dnstest.Start(t, dnstest.Zone{Rcode: dns.RcodeServerFailure})
	log, logs := logtest.Logger()
	m := NewMetrics(prometheus.NewRegistry())
	r := newResolution(resolver.New([]string{srv.Addr}, resolver.Options{Timeout: 5 * time.Second}), time.Nanosecond, log, m)
	if got := lookup(r, "live.example"); got != "error" || r.err() == nil {
		t.Fatalf("%s, %v: want resolution failing", got, r.err())
	}
	srv.Set(t, working)
	if got := lookup(r, "nx.example"); got != "451 4.4.3" {
		t.Errorf("first denial: %s", got)
	}
	if got := lookup(r, "live.example"); got != "mx.live.example" || r.err() != nil || testutil.ToFloat64(m.dnsUp) != 1 {
		t.Errorf("%s, %v: want resolution working", got, r.err())
	}
	if n := logs.Count(`level=WARN msg="delivery: DNS resolution works again"`); n != 1 {
		t.Errorf("%d WARNs that resolution works again:\n%s", n, logs)
	}
	// nx.example comes into being, and goes again: its confirmation starts
	// again.
	srv.Set(t, dnstest.Zone{Records: append([]string{"nx.example. IN A 192.0.2.2"}, working.Records...)})
	if got := lookup(r, "nx.example"); got != "nx.example" {
		t.Errorf("found: %s", got)
	}
	srv.Set(t, working)
	if got := lookup(r, "nx.example"); got != "451 4.4.3" {
		t.Errorf("gone again: %s, want it unconfirmed", got)
	}
	if n := logs.Count(`msg="delivery: DNS says the domain does not exist; its recipients wait until that is confirmed" domain=nx.example`); n != 2 {
		t.Errorf("%d WARNs that nx.example does not exist, want 2:\n%s", n, logs)
	}
}

// TestDenialsBounded: the denials kept are bounded, the oldest dropped
// first.
func TestDenialsBounded(t *testing.T) {
	r := newResolution(nil, time.Hour, nil, NewMetrics(prometheus.NewRegistry()))
	start := time.Now()
	for i := range maxDenials + 10 {
		r.deny(fmt.Sprintf("d%d.example", i), start.Add(time.Duration(i)))
	}
	if len(r.denials) != maxDenials || r.order.Len() != maxDenials {
		t.Fatalf("%d denials kept (%d in order), want %d", len(r.denials), r.order.Len(), maxDenials)
	}
	if at, known := r.deny("D10.example", time.Now()); !known || !at.Equal(start.Add(10)) {
		t.Errorf("d10.example: known %v at %v, want kept from its first denial", known, at)
	}
	if _, known := r.deny("d9.example", time.Now()); known {
		t.Error("d9.example was kept past the bound")
	}
}
