package delivery

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/miekg/dns"

	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay/mtasts"
	"github.com/genropy/postino/relay/tlsrpt"
)

// TLS policies of MX delivery, by recipient domain (TLSPolicies): none and
// opportunistic are the MX route's TLS modes (TLSNone, TLSOpportunistic).
const (
	// PolicyVerify is STARTTLS required, the certificate verified against
	// the system's authorities and the operator's (delivery.tls.roots)
	// for the MX host's name.
	PolicyVerify = "verify"
	// PolicyDANE is DANE required: STARTTLS, and a certificate that
	// matches the MX host's DNSSEC-authenticated TLSA records (RFC 7672).
	PolicyDANE = "dane"
	// PolicyMTASTS is MTA-STS (RFC 8461) enforced: the MX host listed by
	// the domain's policy, STARTTLS, and a certificate verified for its
	// name. Given as a local policy, it requires the domain to publish a
	// policy, and enforces it whatever its mode.
	PolicyMTASTS = "mta-sts"
	// PolicyMTASTSTesting is an MTA-STS policy in mode testing: TLS as
	// opportunistic, what enforce would refuse counted for the domain's
	// TLS report. Only an outcome's TLS says it; it is no local policy.
	PolicyMTASTSTesting = "mta-sts-testing"
)

// Policies are the TLS policies a recipient domain may be given.
func Policies() []string {
	return []string{TLSNone, TLSOpportunistic, PolicyVerify, PolicyDANE, PolicyMTASTS}
}

// TLSPolicies are the TLS policies of MX delivery for some recipient
// domains (delivery.tls.policies), and the authorities PolicyVerify
// trusts. A domain without one takes its route's TLS mode (opportunistic
// unless the route says none), and DANE wherever its MX hosts publish
// authenticated TLSA records: they say what the host's TLS is, where a
// local policy can only guess; else MTA-STS wherever the domain publishes
// a policy, for a domain whose policy is opportunistic or mta-sts.
type TLSPolicies struct {
	exact  map[string]string // by domain, lower case
	suffix map[string]string // by ".domain": its subdomains
	roots  *x509.CertPool    // nil: the system's
	// sts gives the domains' MTA-STS policies; nil: none is looked up.
	sts STSPolicies
	// reports counts the sessions for TLS reports; nil: none is counted.
	reports TLSReports
}

// STSPolicies gives a domain's MTA-STS policy (*mtasts.Cache): nil when
// it publishes none, a *mtasts.FetchError when it announces one that
// cannot be had.
type STSPolicies interface {
	Policy(ctx context.Context, domain string) (*mtasts.Policy, error)
}

// TLSReports counts the TLS result of MX sessions for TLS reports
// (*tlsrpt.Tally).
type TLSReports interface {
	Count(s tlsrpt.Session)
}

// UseMTASTS makes MX delivery apply the domains' MTA-STS policies.
func (p *TLSPolicies) UseMTASTS(s STSPolicies) { p.sts = s }

// ReportTo makes MX delivery count its sessions' TLS results into r.
func (p *TLSPolicies) ReportTo(r TLSReports) { p.reports = r }

// Roots are the authorities policy verify and MTA-STS trust beyond the
// system's (delivery.tls.roots); nil for the system's alone.
func (p *TLSPolicies) Roots() *x509.CertPool {
	if p == nil {
		return nil
	}
	return p.roots
}

// NewTLSPolicies reads the policies, each by a recipient domain
// ("example.com") or by a suffix of their subdomains (".example.com"),
// and rootsFile (PEM; empty for the system's authorities alone).
func NewTLSPolicies(domains map[string]string, rootsFile string) (*TLSPolicies, error) {
	p := &TLSPolicies{exact: map[string]string{}, suffix: map[string]string{}}
	for d, policy := range domains {
		key := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(d)), ".")
		switch policy {
		case TLSNone, TLSOpportunistic, PolicyVerify, PolicyDANE, PolicyMTASTS:
		default:
			return nil, fmt.Errorf("delivery.tls.policies: %s: policy %q: use %s", d, policy, strings.Join(Policies(), ", "))
		}
		if strings.Trim(key, ".") == "" {
			return nil, fmt.Errorf("delivery.tls.policies: %q names no domain: give example.com, or .example.com for its subdomains", d)
		}
		if strings.HasPrefix(key, ".") {
			p.suffix[key] = policy
		} else {
			p.exact[key] = policy
		}
	}
	if rootsFile != "" {
		pool, err := rootPool(rootsFile)
		if err != nil {
			return nil, fmt.Errorf("delivery.tls.roots: %w", err)
		}
		p.roots = pool
	}
	return p, nil
}

// of is domain's policy: its own, else that of the longest suffix it
// ends in, else fallback. A nil p has none.
func (p *TLSPolicies) of(domain, fallback string) string {
	if p == nil {
		return fallback
	}
	domain = strings.ToLower(domain)
	if policy, ok := p.exact[domain]; ok {
		return policy
	}
	for off, end := 0, false; !end; off, end = dns.NextLabel(domain, off) {
		if off == 0 {
			continue
		}
		if policy, ok := p.suffix[domain[off-1:]]; ok {
			return policy
		}
	}
	return fallback
}

// rootPool is the system's authorities and those of file (PEM).
func rootPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// tlsPlan is what a session must do about TLS with one upstream host.
type tlsPlan struct {
	// policy is the one applied: TLSNone, TLSOpportunistic, PolicyVerify,
	// PolicyDANE, PolicyMTASTS or PolicyMTASTSTesting for an MX host; a
	// smarthost route's TLS mode.
	policy string
	// cfg verifies the peer (PolicyVerify, a smarthost's starttls and
	// tls), and verified says by what.
	cfg      *tls.Config
	verified string
	// tlsa are the host's usable, authenticated TLSA records
	// (PolicyDANE), alias's when it is not empty: the host's
	// CNAME-expanded name, which the records are of.
	tlsa  []*dns.TLSA
	alias string
	// why names what requires TLS, for the errors that say it failed.
	why string
	// roots are the authorities PolicyMTASTSTesting checks the peer
	// against, without refusing it; soft is what that check found, and
	// unlisted says that the policy does not list the host.
	roots    *x509.CertPool
	soft     error
	unlisted error
	// report counts the session for the policy domain's TLS report; nil
	// where none is kept.
	report *tlsReport
}

// required reports whether the session may not go on in clear.
func (p *tlsPlan) required() bool {
	return p.policy != TLSNone && p.policy != TLSOpportunistic && p.policy != PolicyMTASTSTesting
}

// config is the handshake's configuration for host, and where it notes
// what verified the peer.
func (p *tlsPlan) config(host string) (*tls.Config, *string) {
	by := new(string)
	switch p.policy {
	case PolicyDANE:
		// SNI names the records' base domain (RFC 7672 section 8.1).
		return &tls.Config{ServerName: cmp.Or(p.alias, host), MinVersion: tls.VersionTLS12,
			// The TLSA records judge the peer, not the authorities.
			InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				var err error
				*by, err = daneVerify(host, p.alias, p.tlsa, cs.PeerCertificates)
				return err
			}}, by
	case PolicyMTASTSTesting:
		// Opportunistic, the certificate judged for the report only.
		return &tls.Config{ServerName: host, InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				p.soft = verifyPKIX(host, p.roots, cs.PeerCertificates)
				*by = outcome.VerifiedNone
				if p.soft == nil {
					*by = outcome.VerifiedPKIX
				}
				return nil
			}}, by
	case TLSOpportunistic:
		// Encrypt when offered, without judging the certificate.
		*by = outcome.VerifiedNone
		return &tls.Config{ServerName: host, InsecureSkipVerify: true}, by
	}
	*by = p.verified
	return p.cfg.Clone(), by
}

// mxPlan is the plan of a policy for an MX host, without DANE.
func (p *TLSPolicies) mxPlan(policy, domain, host string) *tlsPlan {
	plan := &tlsPlan{policy: policy, verified: outcome.VerifiedNone}
	if policy == PolicyVerify {
		plan.cfg = &tls.Config{ServerName: host, RootCAs: p.Roots(), MinVersion: tls.VersionTLS12}
		plan.verified = outcome.VerifiedPKIX
		plan.why = fmt.Sprintf("TLS policy %s of %s (delivery.tls.policies)", policy, domain)
	}
	return plan
}

// routePlan is a smarthost route's plan.
func (r *Route) routePlan() *tlsPlan {
	p := &tlsPlan{policy: r.TLS, cfg: r.tlsConfig, verified: outcome.VerifiedNone, why: "route " + r.Name}
	if r.tlsConfig != nil && !r.SkipVerify {
		p.verified = outcome.VerifiedPKIX
	}
	return p
}
