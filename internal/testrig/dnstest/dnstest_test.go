package dnstest

import (
	"testing"

	"github.com/miekg/dns"
)

// TestAnswers: what the server answers, as a recursive resolver would.
func TestAnswers(t *testing.T) {
	srv := Start(t, Zone{Records: []string{
		"_25._tcp.mx.example. IN TLSA 3 1 1 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"www.example. IN CNAME mx.example.",
		"mx.example. IN A 192.0.2.1",
	}, Rcodes: map[string]int{"lame.example.": dns.RcodeServerFailure}})
	tests := []struct {
		name    string
		qtype   uint16
		rcode   int
		answers int
	}{
		{"mx.example.", dns.TypeA, dns.RcodeSuccess, 1},
		{"www.example.", dns.TypeA, dns.RcodeSuccess, 2}, // the CNAME and its target's A
		{"_25._tcp.mx.example.", dns.TypeTLSA, dns.RcodeSuccess, 1},
		{"mx.example.", dns.TypeAAAA, dns.RcodeSuccess, 0},     // NODATA
		{"_tcp.mx.example.", dns.TypeTXT, dns.RcodeSuccess, 0}, // an empty non-terminal: NODATA
		{"example.", dns.TypeMX, dns.RcodeSuccess, 0},
		{"nx.example.", dns.TypeA, dns.RcodeNameError, 0},
		{".", dns.TypeNS, dns.RcodeNameError, 0}, // no root in the zone
		{"lame.example.", dns.TypeA, dns.RcodeServerFailure, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name+dns.TypeToString[tt.qtype], func(t *testing.T) {
			q := new(dns.Msg)
			q.SetQuestion(tt.name, tt.qtype)
			r, err := dns.Exchange(q, srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			if r.Rcode != tt.rcode || len(r.Answer) != tt.answers || r.AuthenticatedData {
				t.Errorf("%s, %d answers, AD %v; want %s, %d answers, no AD",
					dns.RcodeToString[r.Rcode], len(r.Answer), r.AuthenticatedData, dns.RcodeToString[tt.rcode], tt.answers)
			}
		})
	}
	if qs := srv.Queries(); len(qs) != len(tests) || qs[0] != (Query{Name: "mx.example.", Type: dns.TypeA, Net: "udp"}) {
		t.Errorf("queries %+v", qs)
	}
}
