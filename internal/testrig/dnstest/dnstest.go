// Package dnstest runs a DNS server (miekg/dns) on loopback for tests, as a
// recursive resolver would answer a stub: from records given as zone-file
// lines, over UDP (truncating what does not fit the asker's buffer, as a
// real server does) and TCP on one port, with or without DNSSEC's AD bit,
// and with the code the test tells it (SERVFAIL, REFUSED) for a name or for
// every question.
package dnstest

import (
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// Zone is what a server answers.
type Zone struct {
	// Records are zone-file lines with their owner's full name:
	// "example.com. 300 IN MX 10 mx.example.com.". A name that holds no
	// record, and is no parent of one that does, is answered NXDOMAIN (the
	// root too, unless it holds records: "." NS for a resolver that works);
	// a name that holds records of other types only, NODATA. A CNAME is
	// followed within the zone.
	Records []string
	// AD sets the AD bit on every answer: the server says it validated
	// them (DNSSEC).
	AD bool
	// Rcodes answer questions about a name (its full name, of any type)
	// with that code instead: dns.RcodeServerFailure, dns.RcodeRefused.
	Rcodes map[string]int
	// Rcode, when not 0, answers every question with it: a resolver that
	// cannot resolve anything.
	Rcode int
}

// Query is one question the server was asked.
type Query struct {
	Name string // full name, lower case
	Type uint16
	Net  string // udp or tcp
	// AD and DO are the query's bits: the asker wants to know whether the
	// answer was validated.
	AD, DO bool
}

// Server is a running DNS server.
type Server struct {
	// Addr is host:port, the same for UDP and TCP.
	Addr string

	mu      sync.Mutex
	zone    zone
	queries []Query
}

// zone is a Zone made ready to answer from.
type zone struct {
	Zone
	names map[string][]dns.RR // by lower-case full name
	exist map[string]bool     // the names above and their parents
}

// Start runs a server on 127.0.0.1 until the test ends.
func Start(t testing.TB, z Zone) *Server {
	t.Helper()
	s := &Server{}
	s.Set(t, z)
	pc, ln := listen(t)
	s.Addr = pc.LocalAddr().String()
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: s}, {Listener: ln, Handler: s}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		done := make(chan struct{})
		go func() {
			defer close(done)
			srv.ActivateAndServe()
		}()
		<-started
		t.Cleanup(func() {
			srv.Shutdown()
			<-done
		})
	}
	return s
}

// listen opens a UDP socket and a TCP listener on one port of 127.0.0.1.
func listen(t testing.TB) (net.PacketConn, net.Listener) {
	t.Helper()
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			return pc, ln
		}
		pc.Close()
	}
	t.Fatal("dnstest: no port of 127.0.0.1 free for both UDP and TCP")
	return nil, nil
}

// Set replaces what the server answers.
func (s *Server) Set(t testing.TB, z Zone) {
	t.Helper()
	c := zone{Zone: z, names: map[string][]dns.RR{}, exist: map[string]bool{}}
	for _, line := range z.Records {
		rr, err := dns.NewRR(line)
		if err != nil || rr == nil {
			t.Fatalf("dnstest: record %q: %v", line, err)
		}
		name := strings.ToLower(rr.Header().Name)
		c.names[name] = append(c.names[name], rr)
		for off, end := 0, false; !end; off, end = dns.NextLabel(name, off) {
			c.exist[name[off:]] = true
		}
	}
	s.mu.Lock()
	s.zone = c
	s.mu.Unlock()
}

// Queries are the questions asked so far, in order.
func (s *Server) Queries() []Query {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Query(nil), s.queries...)
}

// ServeDNS answers one query.
func (s *Server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	if len(req.Question) != 1 {
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeFormatError)
		w.WriteMsg(m)
		return
	}
	q := req.Question[0]
	network := w.LocalAddr().Network()
	opt := req.IsEdns0()
	s.mu.Lock()
	s.queries = append(s.queries, Query{Name: strings.ToLower(q.Name), Type: q.Qtype, Net: network,
		AD: req.AuthenticatedData, DO: opt != nil && opt.Do()})
	z := s.zone
	s.mu.Unlock()

	m := z.answer(req, q)
	if opt != nil {
		m.SetEdns0(opt.UDPSize(), opt.Do())
	}
	if network == "udp" {
		size := dns.MinMsgSize
		if opt != nil {
			size = int(opt.UDPSize())
		}
		m.Truncate(size)
	}
	w.WriteMsg(m)
}

// answer is the reply to q.
func (z zone) answer(req *dns.Msg, q dns.Question) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	name := strings.ToLower(q.Name)
	if code, ok := z.Rcodes[name]; ok || z.Rcode != 0 {
		if !ok {
			code = z.Rcode
		}
		m.Rcode = code
		return m
	}
	// A denial of existence is validated as an answer is.
	m.AuthenticatedData = z.AD
	if !z.exist[name] {
		m.Rcode = dns.RcodeNameError
		return m
	}
	// Follow CNAMEs within the zone, as a recursive resolver does, up to
	// a loop's worth.
	for range 8 {
		var next string
		for _, rr := range z.names[name] {
			switch c, ok := rr.(*dns.CNAME); {
			case rr.Header().Rrtype == q.Qtype:
				m.Answer = append(m.Answer, rr)
			case ok && q.Qtype != dns.TypeCNAME:
				m.Answer = append(m.Answer, rr)
				next = strings.ToLower(c.Target)
			}
		}
		if next == "" {
			break
		}
		name = next
	}
	return m
}
