// Package resolver asks the DNS servers the operator names
// (delivery.dns.servers) the questions of MX delivery, and says of each
// answer whether a validating server found it DNSSEC-secure (its AD bit),
// which DANE needs. Without servers named, the relay uses the system's
// resolver instead (net.DefaultResolver), which cannot say.
package resolver

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

const (
	// rounds is how many times the servers are asked in turn: a datagram
	// lost is asked again, as the system's resolver does (attempts:2).
	rounds = 2
	// udpSize is the EDNS0 buffer the questions advertise: what crosses
	// the network without IP fragmentation (DNS Flag Day 2020). A larger
	// answer comes truncated, and is asked again over TCP.
	udpSize = 1232
	// maxChain bounds the CNAMEs followed to the records asked for: a
	// longer chain is a loop.
	maxChain = 8
)

// Options shape a Client.
type Options struct {
	// Timeout bounds one question to one server.
	Timeout time.Duration
	// Validating says that the servers validate DNSSEC. Only then are
	// the questions sent with the DO and AD bits and an answer's AD bit
	// believed: a server that does not validate, or anyone on the path to
	// it, can set the bit.
	Validating bool
}

// Client asks its servers, in order. Its LookupMX, LookupIPAddr and
// LookupNS answer as net.Resolver's do, with the same *net.DNSError; a
// name that does not exist is not found (IsNotFound) like a name without
// records of the type asked, and one that a second server confirmed wraps
// a Confirmed.
type Client struct {
	servers  []string
	opts     Options
	udp, tcp *dns.Client
}

// New is a client of servers, each host:port.
func New(servers []string, opts Options) *Client {
	return &Client{
		servers: slices.Clone(servers), opts: opts,
		udp: &dns.Client{Net: "udp", UDPSize: udpSize, Timeout: opts.Timeout},
		tcp: &dns.Client{Net: "tcp", Timeout: opts.Timeout},
	}
}

// Answer is one server's answer to a question.
type Answer struct {
	// Server is the one that answered.
	Server string
	// NXDomain says that the name does not exist. ConfirmedBy then names
	// a second server that said so too, or is empty when none could be
	// asked, or none answered.
	NXDomain    bool
	ConfirmedBy string
	// Records are the answer's records of the type asked, of the name or
	// of the name its CNAMEs lead to. None without NXDomain is NODATA:
	// the name exists, without records of that type.
	Records []dns.RR
	// Authenticated is the answer's AD bit, when the servers validate
	// (Options.Validating): a validating server found the answer, or the
	// denial that the name or its records exist, DNSSEC-secure. Without
	// Validating it is false.
	Authenticated bool
}

// Lookup asks the servers, in order, for name's records of type qtype
// (dns.TypeMX, dns.TypeTLSA, …). A server that does not answer, or
// answers other than NOERROR or NXDOMAIN (SERVFAIL, REFUSED), is passed
// for the next, and the list is gone through twice. An NXDOMAIN is put to
// the other servers too, so that a second one may confirm it: a broken
// server's must not end mail for good, and a NOERROR from another wins.
// The error, a temporary *net.DNSError, says why no server answered.
func (c *Client) Lookup(ctx context.Context, name string, qtype uint16) (*Answer, error) {
	q := c.question(name, qtype)
	var denied *Answer
	var fails []string
	for range rounds {
		for _, s := range c.servers {
			if denied != nil && s == denied.Server {
				continue
			}
			a, err := c.ask(ctx, q, s)
			switch {
			case err != nil:
				fails = append(fails, err.Error())
				if ctx.Err() != nil {
					return nil, &net.DNSError{Err: strings.Join(fails, "; "), Name: name, IsTemporary: true, UnwrapErr: ctx.Err()}
				}
			case !a.NXDomain:
				return a, nil
			case denied != nil:
				denied.ConfirmedBy = s
				return denied, nil
			default:
				denied = a
			}
		}
	}
	if denied != nil {
		return denied, nil
	}
	return nil, &net.DNSError{Err: strings.Join(fails, "; "), Name: name, IsTemporary: true}
}

// question is the query for name's records of type qtype.
func (c *Client) question(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	// DO asks a validating server for DNSSEC, as Postfix does for DANE;
	// AD in the question says the AD bit of the answer is understood
	// (RFC 6840 section 5.7).
	m.SetEdns0(udpSize, c.opts.Validating)
	m.AuthenticatedData = c.opts.Validating
	return m
}

// ask puts q to server s over UDP, and again over TCP when the answer
// comes truncated.
func (c *Client) ask(ctx context.Context, q *dns.Msg, s string) (*Answer, error) {
	q = q.Copy()
	q.Id = dns.Id()
	r, _, err := c.udp.ExchangeContext(ctx, q, s)
	if err == nil && r.Truncated {
		r, _, err = c.tcp.ExchangeContext(ctx, q, s)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s, err)
	}
	if r.Rcode != dns.RcodeSuccess && r.Rcode != dns.RcodeNameError {
		return nil, fmt.Errorf("%s: answered %s", s, dns.RcodeToString[r.Rcode])
	}
	return &Answer{Server: s, NXDomain: r.Rcode == dns.RcodeNameError, Records: records(r, q.Question[0]),
		Authenticated: c.opts.Validating && r.AuthenticatedData}, nil
}

// records are r's answers of q's type, of q's name or of the name its
// CNAMEs lead to.
func records(r *dns.Msg, q dns.Question) []dns.RR {
	name := q.Name
	for range maxChain {
		next := ""
		for _, rr := range r.Answer {
			if c, ok := rr.(*dns.CNAME); ok && q.Qtype != dns.TypeCNAME && strings.EqualFold(c.Hdr.Name, name) {
				next = c.Target
			}
		}
		if next == "" {
			break
		}
		name = next
	}
	var out []dns.RR
	for _, rr := range r.Answer {
		if h := rr.Header(); h.Rrtype == q.Qtype && strings.EqualFold(h.Name, name) {
			out = append(out, rr)
		}
	}
	return out
}

// Confirmed is what a not-found *net.DNSError wraps when a second server
// said too that the name does not exist.
type Confirmed struct {
	// By is the second server.
	By string
}

func (c *Confirmed) Error() string { return "confirmed by " + c.By }

// ConfirmedBy names the second server.
func (c *Confirmed) ConfirmedBy() string { return c.By }

// notFound is the error of an answer without records of the type asked,
// what.
func (a *Answer) notFound(name, what string) error {
	e := &net.DNSError{Err: "no " + what + " record", Name: name, Server: a.Server, IsNotFound: true}
	if a.NXDomain {
		e.Err = "no such domain (NXDOMAIN)"
	}
	if a.ConfirmedBy != "" {
		e.UnwrapErr = &Confirmed{By: a.ConfirmedBy}
	}
	return e
}

// Validating says whether the servers validate DNSSEC
// (Options.Validating): only then can an answer be Authenticated.
func (c *Client) Validating() bool { return c.opts.Validating }

// LookupMX returns name's MX records.
func (c *Client) LookupMX(ctx context.Context, name string) ([]*net.MX, error) {
	mxs, _, err := c.LookupAuthenticatedMX(ctx, name)
	return mxs, err
}

// LookupAuthenticatedMX is LookupMX, and says whether the answer, or its
// denial that name has MX records, was Authenticated: DANE trusts the
// TLSA records of MX hosts only when the MX answer was (RFC 7672 section
// 2.2.1).
func (c *Client) LookupAuthenticatedMX(ctx context.Context, name string) ([]*net.MX, bool, error) {
	a, err := c.Lookup(ctx, name, dns.TypeMX)
	if err != nil {
		return nil, false, err
	}
	var out []*net.MX
	for _, rr := range a.Records {
		mx := rr.(*dns.MX)
		out = append(out, &net.MX{Host: mx.Mx, Pref: mx.Preference})
	}
	if len(out) == 0 {
		return nil, a.Authenticated, a.notFound(name, "MX")
	}
	return out, a.Authenticated, nil
}

// LookupNS returns name's NS records.
func (c *Client) LookupNS(ctx context.Context, name string) ([]*net.NS, error) {
	a, err := c.Lookup(ctx, name, dns.TypeNS)
	if err != nil {
		return nil, err
	}
	var out []*net.NS
	for _, rr := range a.Records {
		out = append(out, &net.NS{Host: rr.(*dns.NS).Ns})
	}
	if len(out) == 0 {
		return nil, a.notFound(name, "NS")
	}
	return out, nil
}

// LookupTXT returns name's TXT records, each record's strings joined as
// net.Resolver joins them (RFC 7208 section 3.3): MTA-STS and TLS-RPT
// read their records so.
func (c *Client) LookupTXT(ctx context.Context, name string) ([]string, error) {
	a, err := c.Lookup(ctx, name, dns.TypeTXT)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, rr := range a.Records {
		out = append(out, strings.Join(rr.(*dns.TXT).Txt, ""))
	}
	if len(out) == 0 {
		return nil, a.notFound(name, "TXT")
	}
	return out, nil
}

// LookupIPAddr returns host's addresses, IPv4 first: receivers judge mail
// over IPv6 more strictly (its sender's PTR record), and a host often has
// IPv6 addresses without a route to use them. Its A and AAAA records are
// asked for at once; when one question fails and the other finds
// addresses, those are the answer.
func (c *Client) LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error) {
	var a6 *Answer
	var err6 error
	var wg sync.WaitGroup
	wg.Go(func() { a6, err6 = c.Lookup(ctx, host, dns.TypeAAAA) })
	a4, err4 := c.Lookup(ctx, host, dns.TypeA)
	wg.Wait()
	var out []net.IPAddr
	for _, a := range []*Answer{a4, a6} {
		if a == nil {
			continue
		}
		for _, rr := range a.Records {
			switch rr := rr.(type) {
			case *dns.A:
				out = append(out, net.IPAddr{IP: rr.A})
			case *dns.AAAA:
				out = append(out, net.IPAddr{IP: rr.AAAA})
			}
		}
	}
	switch {
	case len(out) > 0:
		return out, nil
	case err4 != nil:
		return nil, err4
	case err6 != nil:
		return nil, err6
	case a4.ConfirmedBy == "" && a6.ConfirmedBy != "":
		// Two servers said the name does not exist: whichever question
		// they answered, it does not.
		return nil, a6.notFound(host, "A or AAAA")
	}
	return nil, a4.notFound(host, "A or AAAA")
}
