package delivery

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/miekg/dns"

	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay/mtasts"
	"github.com/genropy/postino/relay/tlsrpt"
)

// errNoSTARTTLS: the MX host does not offer STARTTLS.
var errNoSTARTTLS = errors.New("STARTTLS not offered")

// stsPlan is the plan for host, an MX host of domain, where DANE does not
// apply: MTA-STS where the domain publishes a policy and its local policy
// lets it (opportunistic, the default, or mta-sts, which requires one),
// else the local policy's. The error is a temporary failure for host: an
// MTA-STS policy that does not list it, or none where mta-sts requires
// one.
func (p *TLSPolicies) stsPlan(ctx context.Context, policy, domain, host string) (*tlsPlan, error) {
	if p == nil || p.sts == nil || (policy != TLSOpportunistic && policy != PolicyMTASTS) || strings.HasPrefix(domain, "[") {
		if policy == PolicyMTASTS {
			return nil, fmt.Errorf("MTA-STS: TLS policy mta-sts of %s (delivery.tls.policies) needs delivery.tls.mta_sts.enabled", domain)
		}
		return p.mxPlan(policy, domain, host), nil
	}
	sts, err := p.sts.Policy(ctx, domain)
	var fe *mtasts.FetchError
	switch {
	case errors.As(err, &fe):
		p.count(tlsrpt.Session{Policy: tlsrpt.Policy{Type: tlsrpt.TypeNoPolicy, Domain: domain}, Result: fe.Result, MXHost: host})
		if policy == PolicyMTASTS {
			return nil, fmt.Errorf("MTA-STS: TLS policy mta-sts of %s (delivery.tls.policies) needs the domain's MTA-STS policy: %w", domain, err)
		}
		return p.mxPlan(policy, domain, host), nil
	case err != nil:
		return nil, err
	case sts == nil || sts.Mode == mtasts.ModeNone:
		if policy == PolicyMTASTS {
			return nil, fmt.Errorf("MTA-STS: TLS policy mta-sts of %s (delivery.tls.policies) needs an MTA-STS policy, and the domain publishes none in force", domain)
		}
		return p.mxPlan(policy, domain, host), nil
	}
	report := p.reporting(tlsrpt.Policy{Type: tlsrpt.TypeSTS, Domain: domain, String: sts.Lines(), MXHost: sts.MX})
	name := sts.String()
	if policy == PolicyMTASTS && sts.Mode != mtasts.ModeEnforce {
		name += ", enforced by TLS policy mta-sts (delivery.tls.policies)"
	}
	if policy == PolicyMTASTS || sts.Mode == mtasts.ModeEnforce {
		if !sts.Match(host) {
			report.count(tlsrpt.Session{Result: tlsrpt.ResultValidationFailure, MXHost: host})
			return nil, fmt.Errorf("%s does not list MX host %s (it lists %s): not sending to it", name, host, strings.Join(sts.MX, ", "))
		}
		return &tlsPlan{policy: PolicyMTASTS, verified: outcome.VerifiedPKIX, why: name, report: report,
			cfg: &tls.Config{ServerName: host, RootCAs: p.roots, MinVersion: tls.VersionTLS12}}, nil
	}
	plan := &tlsPlan{policy: PolicyMTASTSTesting, verified: outcome.VerifiedNone, why: name, roots: p.roots, report: report}
	if !sts.Match(host) {
		plan.unlisted = fmt.Errorf("%s does not list MX host %s", name, host)
	}
	return plan, nil
}

// tlsaReport is the report of host's usable TLSA records, a DANE plan's.
func (p *TLSPolicies) tlsaReport(domain, host string, recs []*dns.TLSA) *tlsReport {
	lines := make([]string, len(recs))
	for i, r := range recs {
		lines[i] = fmt.Sprintf("%d %d %d %s", r.Usage, r.Selector, r.MatchingType, r.Certificate)
	}
	return p.reporting(tlsrpt.Policy{Type: tlsrpt.TypeTLSA, Domain: domain, String: lines, MXHost: []string{host}})
}

// tlsaInvalid counts a session to host that did not happen: its TLSA
// question failed on a signed zone.
func (p *TLSPolicies) tlsaInvalid(domain, host string) {
	p.count(tlsrpt.Session{Policy: tlsrpt.Policy{Type: tlsrpt.TypeTLSA, Domain: domain, MXHost: []string{host}},
		Result: tlsrpt.ResultTLSAInvalid, MXHost: host})
}

// tlsReport counts a plan's sessions under its policy.
type tlsReport struct {
	to     TLSReports
	policy tlsrpt.Policy
}

// reporting is the report of policy, or nil where no report is kept.
func (p *TLSPolicies) reporting(policy tlsrpt.Policy) *tlsReport {
	if p == nil || p.reports == nil {
		return nil
	}
	return &tlsReport{to: p.reports, policy: policy}
}

// count counts s under the report's policy.
func (r *tlsReport) count(s tlsrpt.Session) {
	if r == nil {
		return
	}
	s.Policy = r.policy
	r.to.Count(s)
}

// count counts s, a session without a plan.
func (p *TLSPolicies) count(s tlsrpt.Session) {
	if p != nil && p.reports != nil {
		p.reports.Count(s)
	}
}

// tally counts the session c had with the plan: err is its STARTTLS's
// failure (errNoSTARTTLS when not offered), or nil.
func (p *tlsPlan) tally(c *client, err error) {
	if p.report == nil {
		return
	}
	s := tlsrpt.Session{MXHost: strings.TrimSuffix(c.host, ".")}
	if c.nc != nil {
		s.SendingIP, s.ReceivingIP = addrIP(c.nc.LocalAddr()), addrIP(c.nc.RemoteAddr())
	}
	if err == nil {
		err = cmp.Or(p.soft, p.unlisted)
	}
	if err != nil {
		s.Result = resultOf(err)
	}
	p.report.count(s)
}

// addrIP is a connection's address's IP.
func addrIP(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.IP.String()
	}
	return ""
}

// resultOf is the result type of a TLS report (RFC 8460 section 4.3.2.1)
// that err is.
func resultOf(err error) string {
	var (
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		unknown  x509.UnknownAuthorityError
	)
	switch {
	case errors.Is(err, errNoSTARTTLS):
		return tlsrpt.ResultSTARTTLSNotSupported
	case errors.As(err, &hostname):
		return tlsrpt.ResultHostMismatch
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return tlsrpt.ResultExpired
	case errors.As(err, &unknown):
		return tlsrpt.ResultNotTrusted
	}
	return tlsrpt.ResultValidationFailure
}

// verifyPKIX checks that chain's leaf chains to roots (nil: the system's),
// valid for host and usages (none: a server's).
func verifyPKIX(host string, roots *x509.CertPool, chain []*x509.Certificate, usages ...x509.ExtKeyUsage) error {
	if len(chain) == 0 {
		return fmt.Errorf("%s presented no certificate", host)
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{DNSName: host, Roots: roots, Intermediates: inter, KeyUsages: usages})
	return err
}
