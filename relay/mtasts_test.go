package relay_test

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/genropy/postino/internal/testrig/dnstest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/internal/testrig/testcert"
	"github.com/genropy/postino/internal/testrig/webtest"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
	"github.com/genropy/postino/relay/tlsrpt"
)

// stsRig is what the MTA-STS tests run against on loopback: MX hosts
// (127.0.0.2 with a certificate of the test CA for mx1.test, mx2.test
// and dane.test; 127.0.0.3 with one of another CA for mx3.test), the
// policy hosts of the domains (127.0.0.4, HTTPS with the test CA), and
// a DNS server that answers for them all.
type stsRig struct {
	good, stranger *smtptest.Server
	policies       *webtest.Server
	cert           testcert.Pair
	dns            *dnstest.Server
	port           int
}

// policyOf is each domain's policy as its policy host serves it.
var policyOf = map[string]string{
	"enforce.test": "version: STSv1\nmode: enforce\nmx: mx1.test\nmax_age: 86400\n",
	"outside.test": "version: STSv1\nmode: enforce\nmx: mx1.test\nmx: *.other.test\nmax_age: 86400\n",
	"badcert.test": "version: STSv1\nmode: enforce\nmx: mx3.test\nmax_age: 86400\n",
	"testing.test": "version: STSv1\nmode: testing\nmx: mx1.test\nmax_age: 86400\n",
	"dane.test":    "version: STSv1\nmode: enforce\nmx: nowhere.test\nmax_age: 86400\n",
}

func startSTSRig(t *testing.T, extra ...string) *stsRig {
	t.Helper()
	g := &stsRig{port: smtptest.SharedPort(t, "127.0.0.2", "127.0.0.3")}
	names := []string{"mx1.test", "mx2.test", "127.0.0.5"}
	for d := range policyOf {
		names = append(names, "mta-sts."+d)
	}
	g.cert = testcert.New(t, names...)
	other := testcert.New(t, "mx3.test")
	g.good = smtptest.Start(t, smtptest.Options{Addr: fmt.Sprintf("127.0.0.2:%d", g.port), TLS: g.cert.ServerConfig()})
	g.stranger = smtptest.Start(t, smtptest.Options{Addr: fmt.Sprintf("127.0.0.3:%d", g.port), TLS: other.ServerConfig()})
	g.policies = webtest.StartTLS(t, "127.0.0.4:0", g.cert.ServerConfig(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		text, ok := policyOf[strings.TrimPrefix(r.Host, "mta-sts.")]
		if !ok || r.URL.Path != "/.well-known/mta-sts.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, text)
	}))
	tlsa := &dns.TLSA{Hdr: dns.RR_Header{Name: fmt.Sprintf("_%d._tcp.dane.test.", g.port), Rrtype: dns.TypeTLSA, Class: dns.ClassINET, Ttl: 300}}
	if err := tlsa.Sign(3, 1, 1, g.cert.Leaf); err != nil {
		t.Fatal(err)
	}
	records := []string{". IN NS a.root.test.",
		"enforce.test. IN MX 10 mx1.test.", "outside.test. IN MX 10 mx2.test.", "badcert.test. IN MX 10 mx3.test.",
		"testing.test. IN MX 10 mx3.test.", "dane.test. IN MX 10 dane.test.",
		"mx1.test. IN A 127.0.0.2", "mx2.test. IN A 127.0.0.2", "dane.test. IN A 127.0.0.2", "mx3.test. IN A 127.0.0.3",
		tlsa.String()}
	for d := range policyOf {
		records = append(records, fmt.Sprintf(`_mta-sts.%s. IN TXT "v=STSv1; id=1"`, d), "mta-sts."+d+". IN A 127.0.0.4")
	}
	g.dns = dnstest.Start(t, dnstest.Zone{Records: append(records, extra...), AD: true})
	return g
}

// config is a relay delivering to MX hosts through the rig.
func (g *stsRig) config(t *testing.T) relay.Config {
	cfg, _ := testConfig(t)
	cfg.Routes.Default.Smarthost = ""
	cfg.Delivery.MXPort = g.port
	cfg.Delivery.DNS.Servers = []string{g.dns.Addr}
	cfg.Delivery.DNS.Validating = true
	cfg.Delivery.TLS.Roots = g.cert.CAFile
	cfg.Delivery.TLS.MTASTS.Port = g.policies.Port()
	return cfg
}

// fetches counts the fetches of domain's policy.
func (g *stsRig) fetches(domain string) int {
	n := 0
	for _, r := range g.policies.Requests() {
		if r.Path == "/.well-known/mta-sts.txt" && r.Host == "mta-sts."+domain {
			n++
		}
	}
	return n
}

// reached reports whether the message id reached up.
func reached(up *smtptest.Server, id string) bool {
	for _, m := range up.Messages() {
		if m.Header("X-Genro-Mail-ID") == id {
			return true
		}
	}
	return false
}

// TestMTASTS: MX delivery under the recipient domains' MTA-STS policies
// (RFC 8461), from a real DNS server, a real HTTPS policy host and real
// MX hosts on loopback. Enforce sends only to a listed MX host whose
// certificate verifies, and the reason of a message that waits names the
// policy and what did not match; testing sends; DANE wins where the MX
// host publishes authenticated TLSA records; the local policy mta-sts
// enforces a policy in mode testing.
func TestMTASTS(t *testing.T) {
	g := startSTSRig(t)
	tests := []struct {
		domain string
		policy map[string]string // delivery.tls.policies
		up     *smtptest.Server  // where the message goes; nil: it waits
		tls    string            // the recipient's TLS, when sent
		says   string            // in the recipient's text, when it waits
	}{
		{domain: "enforce.test", up: g.good, tls: "policy mta-sts, verified pkix"},
		{domain: "outside.test", says: "MTA-STS policy enforce of outside.test (id 1) does not list MX host mx2.test (it lists mx1.test, *.other.test): not sending to it"},
		{domain: "badcert.test", says: "which MTA-STS policy enforce of badcert.test (id 1) requires: TLS handshake: tls: failed to verify certificate: x509: certificate signed by unknown authority"},
		{domain: "testing.test", up: g.stranger, tls: "policy mta-sts-testing, verified none"},
		{domain: "testing.test", policy: map[string]string{"testing.test": "mta-sts"},
			says: "MTA-STS policy testing of testing.test (id 1), enforced by TLS policy mta-sts (delivery.tls.policies) does not list MX host mx3.test"},
		{domain: "dane.test", up: g.good, tls: "policy dane, verified dane-ee"},
	}
	for i, tt := range tests {
		t.Run(fmt.Sprintf("%s %v", tt.domain, tt.policy), func(t *testing.T) {
			cfg := g.config(t)
			cfg.Delivery.TLS.Policies = tt.policy
			rl, _ := startLogging(t, cfg)
			rcpt := fmt.Sprintf("r%d@%s", i, tt.domain)
			id := sendTo(t, rl.r.SMTPAddr().String(), []string{rcpt}, "", "x\r\n")
			if tt.up == nil {
				m := waitMessage(t, rl.client, id, func(m admin.Message) bool { return m.Attempts >= 1 })
				r := recipient(m, rcpt)
				if m.Status != "READY" || r.Code != 451 || !strings.Contains(r.Text, tt.says) {
					t.Errorf("status %s, recipient %d %s, want it to wait, saying %q", m.Status, r.Code, r.Text, tt.says)
				}
				if reached(g.good, id) || reached(g.stranger, id) {
					t.Errorf("%s was sent", id)
				}
				return
			}
			m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
			r := recipient(m, rcpt)
			if r.TLS == nil || !strings.HasSuffix(r.TLS.String(), tt.tls) || r.TLS.Version == "" {
				t.Errorf("recipient's TLS %v, want %q", r.TLS, tt.tls)
			}
			if !reached(tt.up, id) {
				t.Errorf("%s did not reach %s", id, tt.up.Addr)
			}
		})
	}
}

// TestMTASTSFetchedOnce: a policy is fetched once for all the messages
// within its max_age (relays sharing an outbox share it: TestCache in
// relay/mtasts).
func TestMTASTSFetchedOnce(t *testing.T) {
	g := startSTSRig(t)
	rl, _ := startLogging(t, g.config(t))
	for i := range 3 {
		rcpt := fmt.Sprintf("r%d@enforce.test", i)
		id := sendTo(t, rl.r.SMTPAddr().String(), []string{rcpt}, "", "x\r\n")
		if m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED"); recipient(m, rcpt).TLS.Policy != "mta-sts" {
			t.Errorf("TLS %+v, want policy mta-sts", recipient(m, rcpt).TLS)
		}
	}
	if n := g.fetches("enforce.test"); n != 1 {
		t.Errorf("the policy was fetched %d times, want once", n)
	}
}

// report is a TLS report as a receiver reads it.
type report struct {
	tlsrpt.Report
	via string
}

// TestTLSReports: the relay counts each session's TLS result by policy
// domain, and sends each window's report to the domains that publish a
// _smtp._tls record: posted to an https: rua (a real HTTPS server on
// loopback), mailed to a mailto: one through the relay itself, to a real
// MX host. The counts summed over the reports are the sessions'.
func TestTLSReports(t *testing.T) {
	var mu sync.Mutex
	var reports []report
	add := func(via string, gz []byte) {
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			t.Errorf("%s: a report that is not gzip: %v", via, err)
			return
		}
		var r tlsrpt.Report
		if err := json.NewDecoder(zr).Decode(&r); err != nil {
			t.Errorf("%s: a report that is not JSON: %v", via, err)
			return
		}
		mu.Lock()
		reports = append(reports, report{r, via})
		mu.Unlock()
	}
	probe := testcert.New(t, "127.0.0.5")
	posts := webtest.StartTLS(t, "127.0.0.5:0", probe.ServerConfig(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") != "application/tlsrpt+gzip" {
			t.Errorf("a report posted as %q", r.Header.Get("Content-Type"))
		}
		gz, _ := io.ReadAll(r.Body)
		add("https", gz)
	}))
	g := startSTSRig(t,
		fmt.Sprintf(`_smtp._tls.enforce.test. IN TXT "v=TLSRPTv1; rua=https://127.0.0.5:%d/tlsrpt"`, posts.Port()),
		`_smtp._tls.testing.test. IN TXT "v=TLSRPTv1; rua=mailto:tls-reports@reports.test"`,
		"reports.test. IN MX 10 mx1.test.")
	cfg := g.config(t)
	roots := bundle(t, g.cert, probe)
	cfg.Delivery.TLS.Roots = roots
	cfg.Delivery.IdleTimeout = relay.Duration(time.Minute)
	cfg.Delivery.TLS.Reports = relay.TLSReportsConfig{Enabled: true, Organization: "Postino Test", Contact: "tls@relay.test",
		Period: relay.Duration(2 * time.Second)}
	rl, _ := startLogging(t, cfg)
	for _, rcpt := range []string{"a@enforce.test", "b@testing.test"} {
		id := sendTo(t, rl.r.SMTPAddr().String(), []string{rcpt}, "", "x\r\n")
		waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	}
	// The mailed reports reach mx1.test, the MX host of reports.test.
	mailed := func() {
		for _, m := range g.good.Messages() {
			if m.To[0] != "tls-reports@reports.test" || m.Header("X-Seen") != "" {
				continue
			}
			gz := attachment(t, m.Data)
			mu.Lock()
			seen := false
			for _, r := range reports {
				seen = seen || r.via == "mailto "+m.Header("Message-ID")
			}
			mu.Unlock()
			if !seen {
				add("mailto "+m.Header("Message-ID"), gz)
			}
		}
	}
	want := map[string]string{
		"enforce.test": "sts success 1 failure 0",
		"testing.test": "sts success 0 failure 1 [certificate-not-trusted mx3.test 127.0.0.3 1]",
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		mailed()
		mu.Lock()
		got := sums(reports)
		mu.Unlock()
		if got["enforce.test"] == want["enforce.test"] && got["testing.test"] == want["testing.test"] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reports sum to %v, want %v", got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range reports {
		if r.Organization != "Postino Test" || r.Contact != "tls@relay.test" || r.ID == "" || !r.DateRange.End.After(r.DateRange.Start) {
			t.Errorf("%s: report %+v", r.via, r.Report)
		}
		for _, p := range r.Policies {
			if strings.HasPrefix(r.via, "https") != (p.Policy.Domain == "enforce.test") {
				t.Errorf("%s carried %s's report", r.via, p.Policy.Domain)
			}
			if p.Policy.Type != "sts" || len(p.Policy.String) == 0 || p.Policy.String[0] != "version: STSv1" || len(p.Policy.MXHost) != 1 {
				t.Errorf("%s: policy %+v", r.via, p.Policy)
			}
		}
	}
}

// sums are the reports' counts by policy domain.
func sums(reports []report) map[string]string {
	type tally struct {
		typ           string
		success, fail int64
		details       map[string]int64
	}
	by := map[string]*tally{}
	for _, r := range reports {
		for _, p := range r.Policies {
			s := by[p.Policy.Domain]
			if s == nil {
				s = &tally{typ: p.Policy.Type, details: map[string]int64{}}
				by[p.Policy.Domain] = s
			}
			s.success += p.Summary.Success
			s.fail += p.Summary.Failure
			for _, f := range p.Failures {
				s.details[fmt.Sprintf("%s %s %s", f.ResultType, f.MXHost, f.ReceivingIP)] += f.Count
			}
		}
	}
	out := map[string]string{}
	for d, s := range by {
		out[d] = fmt.Sprintf("%s success %d failure %d", s.typ, s.success, s.fail)
		for k, n := range s.details {
			out[d] += fmt.Sprintf(" [%s %d]", k, n)
		}
	}
	return out
}

// attachment is the gzip'd report a mailed TLS report carries
// (RFC 8460 section 5.3).
func attachment(t *testing.T, data []byte) []byte {
	t.Helper()
	msg, err := mail.ReadMessage(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	mt, params, err := mime.ParseMediaType(msg.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/report" || params["report-type"] != "tlsrpt" {
		t.Fatalf("a mailed report of type %q %v: %v", mt, params, err)
	}
	if msg.Header.Get("TLS-Report-Domain") != "testing.test" || msg.Header.Get("TLS-Report-Submitter") != "Postino Test" {
		t.Errorf("a mailed report's fields: %v", msg.Header)
	}
	mr := multipart.NewReader(msg.Body, params["boundary"])
	for {
		p, err := mr.NextPart()
		if err != nil {
			t.Fatalf("no application/tlsrpt+gzip part: %v", err)
		}
		if p.Header.Get("Content-Type") == "application/tlsrpt+gzip" {
			b, _ := io.ReadAll(p)
			gz, err := base64.StdEncoding.DecodeString(strings.NewReplacer("\r", "", "\n", "").Replace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return gz
		}
	}
}

// bundle is a file of the authorities of pairs (PEM).
func bundle(t *testing.T, pairs ...testcert.Pair) string {
	t.Helper()
	var pem []byte
	for _, p := range pairs {
		b, err := os.ReadFile(p.CAFile)
		if err != nil {
			t.Fatal(err)
		}
		pem = append(pem, b...)
	}
	file := filepath.Join(t.TempDir(), "roots.pem")
	if err := os.WriteFile(file, pem, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestTLSReportsConfig: delivery.tls.reports needs who reports, and
// delivery.tls.policies' mta-sts needs MTA-STS on.
func TestTLSReportsConfig(t *testing.T) {
	for _, tt := range []struct {
		change func(*relay.Config)
		want   string
	}{
		{change: func(c *relay.Config) {
			c.Delivery.TLS.Reports = relay.TLSReportsConfig{Enabled: true, Organization: "Org", Contact: "tls@example.com",
				Period: relay.Duration(24 * time.Hour), Delay: relay.Duration(time.Hour)}
		}},
		{change: func(c *relay.Config) { c.Delivery.TLS.Reports.Enabled = true }, want: "delivery.tls.reports.organization"},
		{change: func(c *relay.Config) {
			c.Delivery.TLS.Reports = relay.TLSReportsConfig{Enabled: true, Organization: "Org", Contact: "Org <tls@example.com>", Period: relay.Duration(24 * time.Hour)}
		}, want: "delivery.tls.reports.contact"},
		{change: func(c *relay.Config) {
			c.Delivery.TLS.Reports = relay.TLSReportsConfig{Enabled: true, Organization: "Org", Contact: "tls@example.com", Period: relay.Duration(time.Hour), Delay: relay.Duration(time.Hour)}
		}, want: "delay from 0 to less than the period"},
		{change: func(c *relay.Config) {
			c.Delivery.TLS.MTASTS.Enabled = false
			c.Delivery.TLS.Policies = map[string]string{"example.com": "mta-sts"}
		}, want: "mta-sts needs delivery.tls.mta_sts.enabled"},
		{change: func(c *relay.Config) { c.Delivery.TLS.MTASTS.Timeout = 0 }, want: "delivery.tls.mta_sts.timeout"},
	} {
		cfg, _ := testConfig(t)
		tt.change(&cfg)
		err := cfg.Validate(func(string) string { return "" })
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%v, want %q", err, tt.want)
		}
	}
}
