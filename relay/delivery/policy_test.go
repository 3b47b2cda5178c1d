package delivery

import (
	"testing"
	"time"

	"github.com/genropy/postino/internal/testrig/logtest"
)

// TestPolicyOf: a domain's own policy wins over a suffix's, a longer
// suffix over a shorter, and a suffix covers subdomains, not the domain.
func TestPolicyOf(t *testing.T) {
	p, err := NewTLSPolicies(map[string]string{
		"Example.com.": PolicyVerify, ".example.com": TLSNone, ".mail.example.com": PolicyDANE, ".com": TLSOpportunistic,
	}, "")
	if err != nil {
		t.Fatal(err)
	}
	for domain, want := range map[string]string{
		"example.com":        PolicyVerify,
		"EXAMPLE.COM":        PolicyVerify,
		"a.example.com":      TLSNone,
		"mail.example.com":   TLSNone,
		"a.mail.example.com": PolicyDANE,
		"other.com":          TLSOpportunistic,
		"example.org":        "route's",
	} {
		if got := p.of(domain, "route's"); got != want {
			t.Errorf("%s: %s, want %s", domain, got, want)
		}
	}
	if got := (*TLSPolicies)(nil).of("example.com", TLSNone); got != TLSNone {
		t.Errorf("no policies: %s", got)
	}
}

// TestTLSAIgnoredOnce: the log says that a host's TLSA records are
// ignored once per host within noteEvery, not for every connection.
func TestTLSAIgnoredOnce(t *testing.T) {
	log, logs := logtest.Logger()
	d := &dane{log: log, noted: map[string]time.Time{}}
	for range 3 {
		d.ignored("mx1.example", "_25._tcp.mx1.example.", "no AD bit")
	}
	d.ignored("mx2.example", "_25._tcp.mx2.example.", "no AD bit")
	if n := logs.Count("TLSA records are ignored"); n != 2 {
		t.Errorf("%d lines, want one per host:\n%s", n, logs)
	}
	d.noted["mx1.example"] = time.Now().Add(-noteEvery)
	d.ignored("mx1.example", "_25._tcp.mx1.example.", "no AD bit")
	if n := logs.Count("TLSA records are ignored"); n != 3 {
		t.Errorf("%d lines, want the first host's said again after %s:\n%s", n, noteEvery, logs)
	}
}
