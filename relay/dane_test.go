package relay_test

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/genropy/postino/internal/testrig/dnstest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/internal/testrig/testcert"
	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
)

// TestDANE: MX delivery to hosts with TLSA records (RFC 7672), and the
// local TLS policies of delivery.tls.policies, against a real DNS server
// and real MX hosts on loopback. A host whose certificate its
// authenticated TLSA records do not vouch for, or that a policy's
// verification refuses, is not sent to: the message waits, and the
// reason says why. The TLS of the session that carried a recipient is in
// its result and the history.
func TestDANE(t *testing.T) {
	port := smtptest.SharedPort(t, "127.0.0.2", "127.0.0.3")
	cert := testcert.New(t, "mx1.test")
	stranger := testcert.New(t, "mx1.test")
	secure := smtptest.Start(t, smtptest.Options{Addr: fmt.Sprintf("127.0.0.2:%d", port), TLS: cert.ChainConfig()})
	clear := smtptest.Start(t, smtptest.Options{Addr: fmt.Sprintf("127.0.0.3:%d", port)})
	tlsa := func(host string, usage, selector, matching int, c *x509.Certificate) string {
		r := &dns.TLSA{Hdr: dns.RR_Header{Name: fmt.Sprintf("_%d._tcp.%s.", port, host), Rrtype: dns.TypeTLSA, Class: dns.ClassINET, Ttl: 300}}
		if err := r.Sign(usage, selector, matching, c); err != nil {
			t.Fatal(err)
		}
		return r.String()
	}
	tests := []struct {
		name    string
		mx      string   // the recipient domain's MX host
		records []string // its TLSA records
		noAD    bool     // the DNS server does not set the AD bit
		rcodes  map[string]int
		policy  map[string]string // delivery.tls.policies
		roots   bool              // delivery.tls.roots holds the test CA
		up      *smtptest.Server  // where the message goes; nil: it waits
		tls     string            // the recipient's TLS, when sent
		says    string            // in the recipient's text, when it waits
		logs    string            // in the log
	}{
		{name: "DANE-EE matches", mx: "mx1.test", records: []string{tlsa("mx1.test", 3, 1, 1, cert.Leaf)},
			up: secure, tls: "policy dane, verified dane-ee"},
		{name: "DANE-EE of the whole certificate, SHA-512", mx: "mx1.test", records: []string{tlsa("mx1.test", 3, 0, 2, cert.Leaf)},
			up: secure, tls: "policy dane, verified dane-ee"},
		{name: "DANE-EE does not match", mx: "mx1.test", records: []string{tlsa("mx1.test", 3, 1, 1, stranger.Leaf)},
			says: "DANE: the certificate chain of mx1.test matches none of its TLSA records (3 1 1 "},
		{name: "DANE-TA matches", mx: "mx1.test", records: []string{tlsa("mx1.test", 2, 0, 1, cert.CA)},
			up: secure, tls: "policy dane, verified dane-ta"},
		{name: "DANE-TA for another name", mx: "mx3.test", records: []string{tlsa("mx3.test", 2, 1, 1, cert.CA)},
			says: "DANE: mx3.test: the chain leads to the trust anchor of TLSA 2 1 1 "},
		{name: "DANE-TA of another authority", mx: "mx1.test", records: []string{tlsa("mx1.test", 2, 0, 1, stranger.CA)},
			says: "matches none of its TLSA records (2 0 1 "},
		// An MX host that is an alias: its target's records first, then
		// its own (RFC 7672 section 2.2.2).
		{name: "an alias: its target's DANE-EE records", mx: "alias.test",
			records: []string{"alias.test. IN CNAME mx1.test.", tlsa("mx1.test", 3, 1, 1, cert.Leaf)},
			up:      secure, tls: "policy dane, verified dane-ee"},
		{name: "an alias: its target's DANE-TA records, for the target's name", mx: "alias.test",
			records: []string{"alias.test. IN CNAME mx1.test.", tlsa("mx1.test", 2, 0, 1, cert.CA)},
			up:      secure, tls: "policy dane, verified dane-ta"},
		{name: "an alias: its own records where its target has none", mx: "alias.test",
			records: []string{"alias.test. IN CNAME mx3.test.", tlsa("alias.test", 3, 1, 1, cert.Leaf)},
			up:      secure, tls: "policy dane, verified dane-ee"},
		{name: "an alias: its target's records that do not match", mx: "alias.test",
			records: []string{"alias.test. IN CNAME mx1.test.", tlsa("mx1.test", 3, 1, 1, stranger.Leaf), tlsa("alias.test", 3, 1, 1, cert.Leaf)},
			says:    "DANE: the certificate chain of alias.test matches none of its TLSA records (3 1 1 "},
		{name: "no AD bit: the records are ignored", mx: "mx1.test", records: []string{tlsa("mx1.test", 3, 1, 1, stranger.Leaf)}, noAD: true,
			up: secure, tls: "policy opportunistic, verified none", logs: "TLSA records are ignored"},
		{name: "PKIX usages are unusable", mx: "mx1.test", records: []string{tlsa("mx1.test", 1, 1, 1, stranger.Leaf)},
			up: secure, tls: "policy opportunistic, verified none"},
		{name: "a failed TLSA question on a signed zone", mx: "mx1.test", rcodes: map[string]int{fmt.Sprintf("_%d._tcp.mx1.test.", port): dns.RcodeServerFailure},
			says: "DANE: the TLSA question _"},
		{name: "DANE without STARTTLS", mx: "plain.test", records: []string{tlsa("plain.test", 3, 1, 1, cert.Leaf)},
			says: "does not offer STARTTLS, which DANE (its TLSA records) requires"},
		{name: "policy verify, an unknown authority", mx: "mx1.test", policy: map[string]string{"example.test": "verify"},
			says: "which TLS policy verify of example.test (delivery.tls.policies) requires: TLS handshake: tls: failed to verify certificate"},
		{name: "policy verify, the operator's roots", mx: "mx1.test", policy: map[string]string{".test": "dane", "example.test": "verify"}, roots: true,
			up: secure, tls: "policy verify, verified pkix"},
		{name: "policy verify, another name", mx: "mx3.test", policy: map[string]string{"example.test": "verify"}, roots: true,
			says: "not mx3.test"},
		{name: "policy none", mx: "mx1.test", records: []string{tlsa("mx1.test", 3, 1, 1, cert.Leaf)}, policy: map[string]string{".test": "none"},
			up: secure, tls: "in clear, policy none, verified none"},
		{name: "policy dane without TLSA records", mx: "mx1.test", policy: map[string]string{".test": "dane"},
			says: "DANE: TLS policy dane of example.test (delivery.tls.policies) needs usable, DNSSEC-authenticated TLSA records of mx1.test, and it publishes no TLSA record"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zone := dnstest.Zone{Records: append([]string{
				". IN NS a.root.test.",
				"example.test. IN MX 10 " + tt.mx + ".",
				"mx1.test. IN A 127.0.0.2", "mx3.test. IN A 127.0.0.2", "plain.test. IN A 127.0.0.3",
			}, tt.records...), AD: !tt.noAD, Rcodes: tt.rcodes}
			cfg, _ := testConfig(t)
			cfg.Routes.Default.Smarthost = ""
			cfg.Delivery.MXPort = port
			cfg.Delivery.DNS.Servers = []string{dnstest.Start(t, zone).Addr}
			cfg.Delivery.DNS.Validating = true
			cfg.Delivery.TLS.Policies = tt.policy
			if tt.roots {
				cfg.Delivery.TLS.Roots = cert.CAFile
			}
			rl, logs := startLogging(t, cfg)
			rcpt := fmt.Sprintf("r%d@example.test", i)
			id := sendTo(t, rl.r.SMTPAddr().String(), []string{rcpt}, "", "x\r\n")
			if tt.up == nil {
				m := waitMessage(t, rl.client, id, func(m admin.Message) bool { return m.Attempts >= 1 })
				r := recipient(m, rcpt)
				if m.Status != "READY" || r.Code != 451 || !strings.Contains(r.Text, tt.says) {
					t.Errorf("status %s, recipient %d %s, want it to wait, saying %q", m.Status, r.Code, r.Text, tt.says)
				}
				for _, up := range []*smtptest.Server{secure, clear} {
					for _, msg := range up.Messages() {
						if msg.Header("X-Genro-Mail-ID") == id {
							t.Errorf("%s reached %s", id, up.Addr)
						}
					}
				}
				return
			}
			m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
			r := recipient(m, rcpt)
			if r.TLS == nil {
				t.Fatalf("recipient %+v: no TLS", r)
			}
			if !strings.HasSuffix(r.TLS.String(), tt.tls) {
				t.Errorf("recipient's TLS %q, want %q", r.TLS, tt.tls)
			}
			if !strings.Contains(tt.tls, "in clear") && (r.TLS.Version == "" || r.TLS.Cipher == "") {
				t.Errorf("recipient's TLS %+v: no version", r.TLS)
			}
			if tt.logs != "" && logs.Count(tt.logs) != 1 {
				t.Errorf("want one line saying %q:\n%s", tt.logs, logs)
			}
			if got := attemptTLS(m, rcpt); got == nil || *got != *r.TLS {
				t.Errorf("the history's attempt says TLS %+v, the result %+v", got, r.TLS)
			}
			found := false
			for _, msg := range tt.up.Messages() {
				if msg.Header("X-Genro-Mail-ID") == id {
					found = true
					if msg.TLS != (r.TLS.Version != "") {
						t.Errorf("the MX host saw TLS %v, the result says %+v", msg.TLS, r.TLS)
					}
				}
			}
			if !found {
				t.Errorf("%s did not reach %s", id, tt.up.Addr)
			}
		})
	}
}

// TestTLSPolicyConfig: delivery.tls.policies takes the policies there
// are, and refuses dane without validating resolvers.
func TestTLSPolicyConfig(t *testing.T) {
	for _, tt := range []struct {
		policies   map[string]string
		validating bool
		want       string
	}{
		{policies: map[string]string{"example.com": "verify", ".example.net": "none"}},
		{policies: map[string]string{"example.com": "dane"}, validating: true},
		{policies: map[string]string{"example.com": "dane"}, want: "dane needs delivery.dns.servers that validate DNSSEC"},
		{policies: map[string]string{"example.com": "mta-sts"}},
		{policies: map[string]string{"example.com": "strict"}, want: `policy "strict": use none, opportunistic, verify, dane, mta-sts`},
		{policies: map[string]string{".": "none"}, want: "names no domain"},
	} {
		cfg, _ := testConfig(t)
		cfg.Delivery.TLS.Policies = tt.policies
		if tt.validating {
			cfg.Delivery.DNS.Servers, cfg.Delivery.DNS.Validating = []string{"127.0.0.1:53"}, true
		}
		err := cfg.Validate(func(string) string { return "" })
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%v: %v, want %q", tt.policies, err, tt.want)
		}
	}
	cfg, err := relay.LoadConfig("", []string{"POSTINO_DELIVERY_TLS_POLICIES={example.com: verify, .example.org: none}"})
	if err != nil || cfg.Delivery.TLS.Policies["example.com"] != "verify" || cfg.Delivery.TLS.Policies[".example.org"] != "none" {
		t.Errorf("policies from a variable: %v %v", cfg.Delivery.TLS.Policies, err)
	}
}

// attemptTLS is the TLS that m's history says the attempt that sent rcpt
// had.
func attemptTLS(m admin.Message, rcpt string) *outcome.TLS {
	for _, h := range m.History {
		var a struct{ Recipients []outcome.Recipient }
		b, _ := json.Marshal(h.Details)
		if h.Status != "SENT" || json.Unmarshal(b, &a) != nil {
			continue
		}
		for _, r := range a.Recipients {
			if r.Address == rcpt {
				return r.TLS
			}
		}
	}
	return nil
}
