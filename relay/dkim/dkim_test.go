package dkim

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/genropy/postino/internal/testrig/dkimtest"
)

// newKey generates a key of algorithm into dir, as postino dkim keygen
// does, and returns its spec and public record.
func newKey(t testing.TB, dir, domain, selector, algorithm string) (KeySpec, string) {
	t.Helper()
	k, err := GenerateKey(algorithm, 0)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, selector+"."+domain+".pem")
	if err := WriteKey(path, k); err != nil {
		t.Fatal(err)
	}
	rec, err := Record(k)
	if err != nil {
		t.Fatal(err)
	}
	return KeySpec{Domain: domain, Selector: selector, File: path, Active: true}, rec
}

// keys makes the keys of a test: rsa, ed25519 or both for example.com.
type keys struct {
	specs   []KeySpec
	records dkimtest.Records
}

func makeKeys(t testing.TB, algorithms ...string) keys {
	dir := t.TempDir()
	ks := keys{records: dkimtest.Records{}}
	for _, a := range algorithms {
		spec, rec := newKey(t, dir, "example.com", a+"2026", a)
		ks.specs = append(ks.specs, spec)
		ks.records[RecordName("example.com", spec.Selector)] = rec
	}
	return ks
}

func signer(t testing.TB, p Policy, specs []KeySpec) *Signer {
	t.Helper()
	r, err := Load(p, specs)
	if err != nil {
		t.Fatal(err)
	}
	return NewSigner(r, nil)
}

func sign(t testing.TB, s *Signer, msg []byte, domain string) ([]byte, Result) {
	t.Helper()
	res, err := s.Sign(bytes.NewReader(msg), domain)
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(res.Fields), msg...), res
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var fixtures = []string{"plain.eml", "utf8.eml", "multipart.eml", "dots.eml", "long-lines.eml"}

func TestSignVerify(t *testing.T) {
	for _, algs := range [][]string{{"rsa"}, {"ed25519"}, {"rsa", "ed25519"}} {
		ks := makeKeys(t, algs...)
		s := signer(t, DefaultPolicy(), ks.specs)
		for _, f := range fixtures {
			t.Run(strings.Join(algs, "+")+"/"+f, func(t *testing.T) {
				signed, res := sign(t, s, fixture(t, f), "")
				if res.Domain != "example.com" || len(res.Signed) != len(algs) {
					t.Fatalf("result %+v", res)
				}
				if n := strings.Count(res.Fields, "DKIM-Signature:"); n != len(algs) {
					t.Fatalf("%d signatures, want %d", n, len(algs))
				}
				dkimtest.Verify(t, signed, ks.records)
			})
		}
	}
}

func TestTamperedFails(t *testing.T) {
	ks := makeKeys(t, "rsa", "ed25519")
	s := signer(t, DefaultPolicy(), ks.specs)
	signed, _ := sign(t, s, fixture(t, "plain.eml"), "")
	sigEnd := bytes.Index(signed, []byte("From: "))
	for _, tt := range []struct {
		name   string
		change func([]byte) []byte
		fails  bool
	}{
		{"untouched", func(b []byte) []byte { return b }, false},
		{"unsigned header added", func(b []byte) []byte { return insertAt(b, sigEnd, "X-Mailer: relay 2\r\n") }, false},
		{"body changed", func(b []byte) []byte { return bytes.Replace(b, []byte("plain message"), []byte("plain massage"), 1) }, true},
		{"body line added", func(b []byte) []byte { return append(bytes.Clone(b), "P.S. send money\r\n"...) }, true},
		{"second From added", func(b []byte) []byte { return insertAt(b, sigEnd, "From: Boss <boss@example.com>\r\n") }, true},
		{"second Subject added", func(b []byte) []byte { return insertAt(b, sigEnd, "Subject: urgent\r\n") }, true},
		{"second To added", func(b []byte) []byte { return insertAt(b, sigEnd, "To: victim@example.org\r\n") }, true},
		{"second Date added", func(b []byte) []byte { return insertAt(b, sigEnd, "Date: Mon, 1 Jan 2029 00:00:00 +0000\r\n") }, true},
		{"Subject changed", func(b []byte) []byte {
			return bytes.Replace(b, []byte("Subject: plain ascii"), []byte("Subject: plain ASCII"), 1)
		}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			msg := tt.change(signed)
			if tt.fails {
				dkimtest.Fails(t, msg, ks.records)
			} else {
				dkimtest.Verify(t, msg, ks.records)
			}
		})
	}
}

func insertAt(b []byte, at int, s string) []byte {
	out := append(bytes.Clone(b[:at]), s...)
	return append(out, b[at:]...)
}

func TestSignedHeaders(t *testing.T) {
	ks := makeKeys(t, "ed25519")
	p := DefaultPolicy()
	p.Expiry = 7 * 24 * time.Hour
	s := signer(t, p, ks.specs)
	signed, _ := sign(t, s, fixture(t, "multipart.eml"), "")
	verifs, err := dkimtest.GoVerify(signed, ks.records)
	if err != nil || len(verifs) != 1 {
		t.Fatal(verifs, err)
	}
	v := verifs[0]
	got := strings.ToLower(strings.Join(v.HeaderKeys, ":"))
	for _, want := range []string{"from:from", "to:to", "subject:subject", "date:date", "message-id", "mime-version",
		"content-type", "list-unsubscribe:list-unsubscribe-post", "x-genro-mail-id"} {
		if !strings.Contains(got, want) {
			t.Errorf("h=%s lacks %s", got, want)
		}
	}
	for _, absent := range []string{"cc", "reply-to", "received"} {
		if strings.Contains(":"+got+":", ":"+absent+":") {
			t.Errorf("h=%s signs %s, which the message lacks and is not over-signed", got, absent)
		}
	}
	if d := time.Until(v.Expiration); d < 6*24*time.Hour || d > 7*24*time.Hour {
		t.Errorf("x= is %s away, want 7 days", d)
	}
	if !strings.Contains(string(signed), "c=relaxed/relaxed") {
		t.Errorf("canonicalization is not relaxed/relaxed:\n%s", signed[:300])
	}
}

func TestSigningDomain(t *testing.T) {
	dir := t.TempDir()
	rsaSpec, rsaRec := newKey(t, dir, "example.com", "r1", "rsa")
	parentSpec, parentRec := newKey(t, dir, "example.org", "p1", "ed25519")
	idnSpec, idnRec := newKey(t, dir, "exämple.com", "i1", "ed25519")
	records := dkimtest.Records{RecordName("example.com", "r1"): rsaRec, RecordName("example.org", "p1"): parentRec,
		RecordName("xn--exmple-cua.com", "i1"): idnRec}
	s := signer(t, DefaultPolicy(), []KeySpec{rsaSpec, parentSpec, idnSpec})
	plain := fixture(t, "plain.eml")
	for _, tt := range []struct {
		name, msg, override, domain, says string
		signed                            bool
	}{
		{"From's domain", string(plain), "", "example.com", "DKIM-signed d=example.com s=r1 (rsa-sha256)", true},
		{"the route's domain", string(plain), "example.org", "example.org", "DKIM-signed d=example.org s=p1 (ed25519-sha256)", true},
		{"an internationalised domain as A-label", strings.Replace(string(plain), "App <app@example.com>", "App <zoë@exämple.com>", 1),
			"", "xn--exmple-cua.com", "DKIM-signed d=xn--exmple-cua.com s=i1 (ed25519-sha256)", true},
		{"a domain without a key", strings.Replace(string(plain), "app@example.com", "app@example.net", 1),
			"", "example.net", "not DKIM-signed: no key for example.net", false},
		{"From in upper case", strings.Replace(string(plain), "app@example.com", "APP@EXAMPLE.COM", 1), "", "example.com", "DKIM-signed d=example.com s=r1 (rsa-sha256)", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			signed, res := sign(t, s, []byte(tt.msg), tt.override)
			if res.Domain != tt.domain || res.String() != tt.says {
				t.Errorf("result %q (domain %s), want %q", res, res.Domain, tt.says)
			}
			if tt.signed {
				dkimtest.Verify(t, signed, records)
			} else if res.Fields != "" {
				t.Errorf("signed without a key: %s", res.Fields)
			}
		})
	}
}

func TestRequired(t *testing.T) {
	ks := makeKeys(t, "ed25519")
	p := DefaultPolicy()
	p.Required = true
	reg := prometheus.NewRegistry()
	r, err := Load(p, ks.specs)
	if err != nil {
		t.Fatal(err)
	}
	s := NewSigner(r, NewMetrics(reg))
	msg := bytes.Replace(fixture(t, "plain.eml"), []byte("app@example.com"), []byte("app@example.net"), 1)
	_, err = s.Sign(bytes.NewReader(msg), "")
	if !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), "example.net") || !strings.Contains(err.Error(), "dkim.required") {
		t.Errorf("no key with dkim.required: %v", err)
	}
	if _, err := s.Sign(bytes.NewReader(fixture(t, "plain.eml")), ""); err != nil {
		t.Fatal(err)
	}
	mf := `
# HELP postino_dkim_signatures_total DKIM signatures made, by signing domain and algorithm.
# TYPE postino_dkim_signatures_total counter
postino_dkim_signatures_total{algorithm="ed25519",domain="example.com"} 1
# HELP postino_dkim_unsigned_total Messages sent unsigned (or refused, with dkim.required) because their domain has no key.
# TYPE postino_dkim_unsigned_total counter
postino_dkim_unsigned_total 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(mf), "postino_dkim_signatures_total", "postino_dkim_unsigned_total"); err != nil {
		t.Error(err)
	}
}

func TestSwap(t *testing.T) {
	old := makeKeys(t, "rsa")
	s := signer(t, DefaultPolicy(), old.specs)
	next := makeKeys(t, "ed25519")
	r, err := Load(DefaultPolicy(), next.specs)
	if err != nil {
		t.Fatal(err)
	}
	s.Swap(r)
	signed, res := sign(t, s, fixture(t, "plain.eml"), "")
	if len(res.Signed) != 1 || !strings.Contains(res.Signed[0], "ed25519") {
		t.Fatalf("after the swap: %+v", res)
	}
	dkimtest.Verify(t, signed, next.records)
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode, block *pem.Block) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(block), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(path, mode)
		return path
	}
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	smallKey, _ := rsa.GenerateKey(rand.Reader, 1024)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pkcs8 := func(k crypto.Signer) []byte {
		b, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	edKey, _ := GenerateKey("ed25519", 0)
	for _, tt := range []struct {
		name    string
		path    string
		wantErr string
	}{
		{"RSA PKCS#1", write("pkcs1.pem", 0o600, &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)}), ""},
		{"RSA PKCS#8", write("rsa8.pem", 0o600, &pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8(rsaKey)}), ""},
		{"Ed25519 PKCS#8", write("ed.pem", 0o640, &pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8(edKey)}), ""},
		{"readable by everyone", write("open.pem", 0o644, &pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8(edKey)}), "readable or writable by every user (mode 0644)"},
		{"RSA of 1024 bits", write("small.pem", 0o600, &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(smallKey)}), "RSA of 1024 bits"},
		{"ECDSA", write("ec.pem", 0o600, &pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8(ecKey)}), "RSA or Ed25519"},
		{"a certificate", write("cert.pem", 0o600, &pem.Block{Type: "CERTIFICATE", Bytes: []byte("x")}), `"CERTIFICATE" block`},
		{"garbage in the block", write("garbage.pem", 0o600, &pem.Block{Type: "PRIVATE KEY", Bytes: []byte("garbage")}), "cannot be parsed"},
		{"missing", filepath.Join(dir, "nonesuch.pem"), "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadKey(tt.path)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), tt.path) {
				t.Errorf("error %v, want one naming %s and saying %q", err, tt.path, tt.wantErr)
			}
		})
	}
	os.WriteFile(filepath.Join(dir, "notpem.pem"), []byte("not a key"), 0o600)
	if _, err := LoadKey(filepath.Join(dir, "notpem.pem")); err == nil || !strings.Contains(err.Error(), "not PEM") {
		t.Errorf("not PEM: %v", err)
	}
}

func TestLoadKeyring(t *testing.T) {
	dir := t.TempDir()
	a, _ := newKey(t, dir, "example.com", "a", "rsa")
	b, _ := newKey(t, dir, "example.com", "b", "rsa")
	e, _ := newKey(t, dir, "example.com", "e", "ed25519")
	inactive := b
	inactive.Active = false
	noFrom := DefaultPolicy()
	noFrom.Headers = []string{"Subject"}
	badCanon := DefaultPolicy()
	badCanon.Canonicalization = "loose/relaxed"
	for _, tt := range []struct {
		name    string
		policy  Policy
		specs   []KeySpec
		wantErr string
	}{
		{"rsa and ed25519 active", DefaultPolicy(), []KeySpec{a, e}, ""},
		{"a second rsa key waiting", DefaultPolicy(), []KeySpec{a, inactive, e}, ""},
		{"two active rsa keys", DefaultPolicy(), []KeySpec{a, b}, "two active rsa keys (selectors a and b)"},
		{"a selector twice", DefaultPolicy(), []KeySpec{a, a}, "given twice"},
		{"bad domain", DefaultPolicy(), []KeySpec{{Domain: "exa mple..com", Selector: "s", File: a.File}}, "not a valid domain"},
		{"bad selector", DefaultPolicy(), []KeySpec{{Domain: "example.com", Selector: "a;b", File: a.File}}, "DNS label"},
		{"no From signed", noFrom, nil, "must include From"},
		{"unknown canonicalization", badCanon, nil, "loose/relaxed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(tt.policy, tt.specs)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestKeygenAndCheck(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		algorithm string
		bits      int
	}{{"rsa", 0}, {"rsa", 4096}, {"ed25519", 0}} {
		t.Run(tt.algorithm, func(t *testing.T) {
			k, err := GenerateKey(tt.algorithm, tt.bits)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, tt.algorithm+string(rune('0'+tt.bits%10))+".pem")
			if err := WriteKey(path, k); err != nil {
				t.Fatal(err)
			}
			if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
				t.Errorf("key file mode %04o", st.Mode().Perm())
			}
			if err := WriteKey(path, k); err == nil || !strings.Contains(err.Error(), "never overwritten") {
				t.Errorf("overwrite: %v", err)
			}
			loaded, err := LoadKey(path)
			if err != nil {
				t.Fatal(err)
			}
			rec, _ := Record(k)
			line := ZoneLine("example.com", "s1", rec)
			// The zone line's strings, joined, are the record, each at most
			// 255 octets.
			name, rest, _ := strings.Cut(line, " IN TXT ")
			if name != "s1._domainkey.example.com." {
				t.Errorf("record name %q", name)
			}
			var joined string
			for _, part := range strings.Split(rest, `" "`) {
				part = strings.Trim(part, `"`)
				if len(part) > 255 {
					t.Errorf("a string of %d octets", len(part))
				}
				joined += part
			}
			if joined != rec {
				t.Errorf("zone line %s does not carry %s", line, rec)
			}
			key := &Key{Domain: "example.com", Selector: "s1", File: path, Signer: loaded}
			lookup := func(recs ...string) LookupTXT {
				return func(_ context.Context, name string) ([]string, error) {
					if name != "s1._domainkey.example.com" {
						t.Errorf("looked up %s", name)
					}
					if recs == nil {
						return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
					}
					return recs, nil
				}
			}
			if err := Check(context.Background(), lookup(joined), key); err != nil {
				t.Errorf("check of the published record: %v", err)
			}
			other, _ := GenerateKey(tt.algorithm, tt.bits)
			otherRec, _ := Record(other)
			if err := Check(context.Background(), lookup(otherRec), key); !errors.Is(err, ErrRecordMismatch) || !strings.Contains(err.Error(), "publish: "+line) {
				t.Errorf("check against another key's record: %v", err)
			}
			if err := Check(context.Background(), lookup(), key); err == nil || !strings.Contains(err.Error(), "no TXT record") {
				t.Errorf("check without a record: %v", err)
			}
			if err := Check(context.Background(), lookup("v=DKIM1; p="), key); !errors.Is(err, ErrRecordMismatch) || !strings.Contains(err.Error(), "revoked") {
				t.Errorf("check against a revoked record: %v", err)
			}
		})
	}
	for _, bad := range []struct {
		algorithm string
		bits      int
	}{{"rsa", 1024}, {"dsa", 0}, {"ed25519", 256}} {
		if _, err := GenerateKey(bad.algorithm, bad.bits); err == nil {
			t.Errorf("GenerateKey(%s, %d) made a key", bad.algorithm, bad.bits)
		}
	}
}

func BenchmarkSign(b *testing.B) {
	msg := fixture(b, "multipart.eml")
	for _, alg := range []string{"rsa", "ed25519"} {
		b.Run(alg, func(b *testing.B) {
			s := signer(b, DefaultPolicy(), makeKeys(b, alg).specs)
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Sign(bytes.NewReader(msg), ""); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
