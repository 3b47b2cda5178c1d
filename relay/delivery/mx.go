package delivery

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
)

// Resolver answers the DNS questions of MX delivery; *net.Resolver is one,
// and tests give their own.
type Resolver interface {
	LookupMX(ctx context.Context, name string) ([]*net.MX, error)
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// dnsNotFound reports whether err says the name has no such record.
func dnsNotFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

// mxHosts lists the hosts that take mail for domain, most preferred first
// (hosts of equal preference in random order). Without MX records the
// domain itself is the host, if it has an address (RFC 5321 section 5.1).
// A permanent verdict comes back as a Reply; a DNS failure that may pass as
// an error.
func mxHosts(ctx context.Context, res Resolver, domain string) ([]string, *Reply, error) {
	if lit, ok := strings.CutPrefix(domain, "["); ok {
		ip := strings.TrimPrefix(strings.TrimSuffix(lit, "]"), "IPv6:")
		return []string{ip}, nil, nil
	}
	mxs, err := res.LookupMX(ctx, domain)
	if err != nil && !dnsNotFound(err) {
		return nil, nil, fmt.Errorf("MX lookup of %s: %w", domain, err)
	}
	if len(mxs) == 1 && (mxs[0].Host == "." || mxs[0].Host == "") {
		v := verdict(556, "5.1.10", "%s does not accept mail (null MX, RFC 7505)", domain)
		return nil, &v, nil
	}
	if len(mxs) == 0 {
		_, err := res.LookupIPAddr(ctx, domain)
		switch {
		case dnsNotFound(err):
			v := verdict(550, "5.1.2", "domain %s does not exist: it has no MX, A or AAAA record", domain)
			return nil, &v, nil
		case err != nil:
			return nil, nil, fmt.Errorf("address lookup of %s: %w", domain, err)
		}
		return []string{domain}, nil, nil
	}
	mxs = slices.Clone(mxs)
	rand.Shuffle(len(mxs), func(i, j int) { mxs[i], mxs[j] = mxs[j], mxs[i] })
	slices.SortStableFunc(mxs, func(a, b *net.MX) int { return int(a.Pref) - int(b.Pref) })
	hosts := make([]string, len(mxs))
	for i, mx := range mxs {
		hosts[i] = strings.TrimSuffix(mx.Host, ".")
	}
	return hosts, nil, nil
}
