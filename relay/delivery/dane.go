package delivery

import (
	"context"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/genropy/postino/outcome"
)

const (
	// noteEvery is how often the log says again, of one MX host, that its
	// TLSA records are ignored: once per connection would be per message.
	noteEvery = time.Hour
	// maxNotes bounds the hosts remembered for it.
	maxNotes = 10000
)

// dane is DANE for MX delivery (RFC 7672): it looks up the TLSA records of
// MX hosts, and judges the certificates they present by them.
//
// The records are believed only from a validating resolver
// (delivery.dns.validating) that set the AD bit on their answer, and only
// for an MX host that an authenticated MX answer named: a forged MX answer
// could name a host of the forger's, with records of its own. The host's
// address records need not be authenticated (RFC 7672 section 2.2.2 asks
// it of them): the records name the key the host must prove, and forged
// addresses can only send the session where that proof fails, and the
// message waits, as it would for addresses that do not answer. Whether
// they were is asked only when the TLSA question fails: then an
// authenticated address answer says the host's zone is signed, and its
// TLSA records may exist, so the message waits rather than going in clear
// (section 2.2.3).
type dane struct {
	log *slog.Logger

	mu    sync.Mutex
	noted map[string]time.Time // host: when the log said its records were ignored
}

// tlsaRecords is what DANE makes of one host's TLSA question.
type tlsaRecords struct {
	// usable are the authenticated records DANE applies: DANE-TA(2) and
	// DANE-EE(3), of known selectors and matching types.
	usable []*dns.TLSA
	// alias is the host's CNAME-expanded name when the records are that
	// name's (RFC 7672 section 2.2.2); empty when they are the host's.
	alias string
	// none says why there are none usable, when policy dane needs them.
	none string
}

// maxAliases bounds the CNAME chain followed from an MX host's name.
const maxAliases = 8

// lookup asks res for host's TLSA records at port: first those of its
// CNAME-expanded name, where an authenticated chain of CNAMEs makes host
// an alias, then, without usable ones there, host's own (RFC 7672
// section 2.2.2). mxSecure says whether the MX answer that named host was
// authenticated. The error is a failure that must not fall back to clear:
// the question failed on a signed zone.
func (d *dane) lookup(ctx context.Context, res dnssec, host string, port int, mxSecure bool) (tlsaRecords, error) {
	if alias := d.expand(ctx, res, host); alias != "" {
		r, err := d.lookupAt(ctx, res, alias, port, mxSecure)
		if err != nil || len(r.usable) > 0 {
			r.alias = alias
			return r, err
		}
	}
	return d.lookupAt(ctx, res, host, port, mxSecure)
}

// expand is host's CNAME-expanded name when DNSSEC authenticated every
// CNAME of the chain; empty when host is no alias, or its chain is not
// authenticated (its target's records could be a forger's).
func (d *dane) expand(ctx context.Context, res dnssec, host string) string {
	name := dns.Fqdn(host)
	for range maxAliases {
		a, err := res.Lookup(ctx, name, dns.TypeCNAME)
		if err != nil || len(a.Records) == 0 || !a.Authenticated {
			break
		}
		name = a.Records[0].(*dns.CNAME).Target
	}
	if strings.EqualFold(name, dns.Fqdn(host)) {
		return ""
	}
	return strings.TrimSuffix(name, ".")
}

// lookupAt is lookup's question for one name, host's or its alias.
func (d *dane) lookupAt(ctx context.Context, res dnssec, host string, port int, mxSecure bool) (tlsaRecords, error) {
	name := "_" + strconv.Itoa(port) + "._tcp." + dns.Fqdn(host)
	a, err := res.Lookup(ctx, name, dns.TypeTLSA)
	if err != nil {
		if mxSecure && d.signed(ctx, res, host) {
			return tlsaRecords{}, fmt.Errorf("DANE: the TLSA question %s failed, and %s's zone is signed: not sending in clear (%w)", name, host, err)
		}
		return tlsaRecords{none: fmt.Sprintf("its TLSA question %s failed: %v", name, err)}, nil
	}
	if len(a.Records) == 0 {
		return tlsaRecords{none: "it publishes no TLSA record (" + name + ")"}, nil
	}
	if !a.Authenticated || !mxSecure {
		why := "the TLSA answer was not DNSSEC-authenticated (no AD bit, or delivery.dns.validating is off)"
		if a.Authenticated {
			why = "the MX answer that named it was not DNSSEC-authenticated"
		}
		d.ignored(host, name, why)
		return tlsaRecords{none: "its TLSA records are ignored: " + why}, nil
	}
	var r tlsaRecords
	for _, rr := range a.Records {
		if t := rr.(*dns.TLSA); usable(t) {
			r.usable = append(r.usable, t)
		}
	}
	if len(r.usable) == 0 {
		// PKIX-TA(0) and PKIX-EE(1) need the authorities a sender of mail
		// cannot know the receiver uses (RFC 7672 section 3.1.3):
		// opportunistic, as without records.
		r.none = "none of its TLSA records is usable for SMTP (only DANE-TA(2) and DANE-EE(3) are)"
	}
	return r, nil
}

// signed reports whether host's zone is signed: its address answer was
// authenticated, or could not be had.
func (d *dane) signed(ctx context.Context, res dnssec, host string) bool {
	a, err := res.Lookup(ctx, host, dns.TypeA)
	return err != nil || a.Authenticated
}

// ignored says in the log that host's TLSA records are ignored, once per
// host per noteEvery.
func (d *dane) ignored(host, name, why string) {
	now := time.Now()
	d.mu.Lock()
	last, seen := d.noted[host]
	due := !seen || now.Sub(last) >= noteEvery
	if due {
		if len(d.noted) >= maxNotes {
			clear(d.noted)
		}
		d.noted[host] = now
	}
	d.mu.Unlock()
	if due {
		d.log.Info("delivery: DANE: the MX host's TLSA records are ignored; its TLS stays opportunistic",
			"host", host, "tlsa", name, "why", why, "said_again_after", noteEvery)
	}
}

// usable reports whether DANE for SMTP applies t (RFC 7672 section 3.1).
func usable(t *dns.TLSA) bool {
	return (t.Usage == 2 || t.Usage == 3) && t.Selector <= 1 && t.MatchingType <= 2
}

// daneVerify judges the chain host presented by its usable TLSA records:
// a DANE-EE record matches the leaf, its name and dates unchecked (RFC
// 7672 section 3.1.1); a DANE-TA record matches a certificate of the
// chain, or is one (2 0 0), and the leaf chains to it, valid for host or
// for alias, host's CNAME-expanded name whose records they are, when not
// empty (sections 3.2.2 and 2.2.2). It says which verified the peer.
func daneVerify(host, alias string, recs []*dns.TLSA, chain []*x509.Certificate) (string, error) {
	if len(chain) == 0 {
		return "", fmt.Errorf("DANE: %s presented no certificate", host)
	}
	var taErrs []string
	for _, r := range recs {
		if r.Usage == 3 && r.Verify(chain[0]) == nil {
			return outcome.VerifiedDANEEE, nil
		}
	}
	for _, r := range recs {
		if r.Usage != 2 {
			continue
		}
		for _, ta := range anchors(r, chain[1:]) {
			err := verifyChain(host, ta, chain)
			if err != nil && alias != "" && verifyChain(alias, ta, chain) == nil {
				err = nil
			}
			if err == nil {
				return outcome.VerifiedDANETA, nil
			}
			taErrs = append(taErrs, fmt.Sprintf("the chain leads to the trust anchor of TLSA %s, but %v", brief(r), err))
		}
	}
	if len(taErrs) > 0 {
		return "", fmt.Errorf("DANE: %s: %s", host, strings.Join(taErrs, "; "))
	}
	names := make([]string, len(recs))
	for i, r := range recs {
		names[i] = brief(r)
	}
	return "", fmt.Errorf("DANE: the certificate chain of %s matches none of its TLSA records (%s)", host, strings.Join(names, ", "))
}

// anchors are the certificates of chain a DANE-TA record r matches, and
// the certificate r holds whole (2 0 0), which the peer need not send.
func anchors(r *dns.TLSA, chain []*x509.Certificate) []*x509.Certificate {
	var out []*x509.Certificate
	for _, c := range chain {
		if r.Verify(c) == nil {
			out = append(out, c)
		}
	}
	if r.Selector == 0 && r.MatchingType == 0 {
		if der, err := hex.DecodeString(r.Certificate); err == nil {
			if c, err := x509.ParseCertificate(der); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// verifyChain checks that chain's leaf chains to ta, valid for host: the
// records, not the authorities, say what the certificate is for.
func verifyChain(host string, ta *x509.Certificate, chain []*x509.Certificate) error {
	roots := x509.NewCertPool()
	roots.AddCert(ta)
	return verifyPKIX(host, roots, chain, x509.ExtKeyUsageAny)
}

// brief is a TLSA record as errors name it: "3 1 1 a1b2c3d4…".
func brief(r *dns.TLSA) string {
	data := r.Certificate
	if len(data) > 16 {
		data = data[:16] + "…"
	}
	return fmt.Sprintf("%d %d %d %s", r.Usage, r.Selector, r.MatchingType, data)
}
