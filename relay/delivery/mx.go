package delivery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"

	"github.com/genropy/postino/relay/resolver"
)

// Resolver answers the DNS questions of MX delivery: *net.Resolver (the
// system's) and *resolver.Client (delivery.dns.servers) are ones. A name
// without the records asked for, or that does not exist, is a
// *net.DNSError with IsNotFound.
type Resolver interface {
	LookupMX(ctx context.Context, name string) ([]*net.MX, error)
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
	// LookupNS is asked of the root zone, "." (resolution.probe).
	LookupNS(ctx context.Context, name string) ([]*net.NS, error)
}

// dnssec is a Resolver that says whether a validating resolver found its
// answers DNSSEC-secure: *resolver.Client, whose answers are Authenticated
// only with delivery.dns.validating. DANE needs one that validates; with
// the system's resolver, or servers that do not validate, MX delivery
// never looks TLSA records up: no answer of theirs could be believed, and
// each new session would pay a question for nothing.
type dnssec interface {
	LookupAuthenticatedMX(ctx context.Context, name string) ([]*net.MX, bool, error)
	Lookup(ctx context.Context, name string, qtype uint16) (*resolver.Answer, error)
	Validating() bool
}

// lookupMX is res's answer to domain's MX question, and whether it was
// authenticated.
func lookupMX(ctx context.Context, res Resolver, domain string) ([]*net.MX, bool, error) {
	if s, ok := res.(dnssec); ok {
		return s.LookupAuthenticatedMX(ctx, domain)
	}
	mxs, err := res.LookupMX(ctx, domain)
	return mxs, false, err
}

// dnsNotFound reports whether err says the name has no such record.
func dnsNotFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

// confirmedBy names the second server that said too that the name does not
// exist (as resolver.Client's errors do), or is empty.
func confirmedBy(err error) string {
	var c interface{ ConfirmedBy() string }
	if errors.As(err, &c) {
		return c.ConfirmedBy()
	}
	return ""
}

// noDomain is DNS's answer that a domain has no host to take its mail: it
// does not exist, or has neither MX nor address records. It is final once
// confirmed (resolution.judge).
type noDomain struct {
	domain string
	// confirmedBy is the second server that said the domain does not exist.
	confirmedBy string
	// err is the address lookup's error.
	err error
}

func (e *noDomain) Error() string {
	return fmt.Sprintf("domain %s does not exist: it has no MX, A or AAAA record (%v)", e.domain, e.err)
}

// mxHosts lists the hosts that take mail for domain, most preferred first
// (hosts of equal preference in random order), and says whether DNSSEC
// authenticated the list (lookupMX). Without MX records the domain itself
// is the host, if it has an address (RFC 5321 section 5.1), authenticated
// when the denial of its MX records was. A permanent verdict (null MX)
// comes back as a Reply; a domain with neither as a *noDomain error; a DNS
// failure that may pass as another error.
func mxHosts(ctx context.Context, res Resolver, domain string) (hosts []string, secure bool, rep *Reply, err error) {
	if lit, ok := strings.CutPrefix(domain, "["); ok {
		ip := strings.TrimPrefix(strings.TrimSuffix(lit, "]"), "IPv6:")
		return []string{ip}, false, nil, nil
	}
	mxs, secure, mxErr := lookupMX(ctx, res, domain)
	if mxErr != nil && !dnsNotFound(mxErr) {
		return nil, false, nil, fmt.Errorf("MX lookup of %s: %w", domain, mxErr)
	}
	if len(mxs) == 1 && (mxs[0].Host == "." || mxs[0].Host == "") {
		v := verdict(556, "5.1.10", "%s does not accept mail (null MX, RFC 7505)", domain)
		return nil, false, &v, nil
	}
	if len(mxs) == 0 {
		_, err := res.LookupIPAddr(ctx, domain)
		switch {
		case dnsNotFound(err):
			// The MX question comes first: two servers that said the
			// domain does not exist settle it.
			return nil, false, nil, &noDomain{domain: domain, confirmedBy: confirmedBy(mxErr), err: err}
		case err != nil:
			return nil, false, nil, fmt.Errorf("address lookup of %s: %w", domain, err)
		}
		return []string{domain}, secure, nil, nil
	}
	mxs = slices.Clone(mxs)
	rand.Shuffle(len(mxs), func(i, j int) { mxs[i], mxs[j] = mxs[j], mxs[i] })
	slices.SortStableFunc(mxs, func(a, b *net.MX) int { return int(a.Pref) - int(b.Pref) })
	hosts = make([]string, len(mxs))
	for i, mx := range mxs {
		hosts[i] = strings.TrimSuffix(mx.Host, ".")
	}
	return hosts, secure, nil, nil
}
