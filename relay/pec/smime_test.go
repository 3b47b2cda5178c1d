package pec_test

import (
	"bytes"
	"crypto/x509"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/relay/pec"
	"github.com/genropy/postino/relay/pec/pectest"
)

// afterExpiry is after the test certificates expired (pectest: 2099).
var afterExpiry = time.Date(2100, time.June, 1, 12, 0, 0, 0, time.UTC)

const signerName = "Posta Certificata Provider Test <" + pectest.ProviderAddress + ">"

func TestSignature(t *testing.T) {
	ca := pectest.NewCA(t)
	other := pectest.NewCA(t)
	bundle, err := pec.LoadTrustBundle(ca.BundleFile(t))
	if err != nil {
		t.Fatal(err)
	}
	signed := ca.Receipt(t, pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, Date: sent})

	tests := []struct {
		name    string
		raw     []byte
		roots   *x509.CertPool
		now     time.Time
		status  pec.SignatureStatus
		signer  string
		errWith string
	}{
		{"valid", signed, ca.Pool(), checkAt, pec.SignatureValid, signerName, ""},
		{"valid, roots from a bundle file", signed, bundle, checkAt, pec.SignatureValid, signerName, ""},
		{"valid now", signed, ca.Pool(), time.Time{}, pec.SignatureValid, signerName, ""},
		{
			// Mailboxes store messages with LF line ends: the signature is
			// over the CRLF form all the same.
			"valid, stored with LF", bytes.ReplaceAll(signed, []byte("\r\n"), []byte("\n")),
			ca.Pool(), checkAt, pec.SignatureValid, signerName, "",
		},
		{"other roots", signed, other.Pool(), checkAt, pec.SignatureInvalid, signerName, "certificate"},
		{"before the certificates", signed, ca.Pool(), time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC), pec.SignatureInvalid, signerName, "certificate"},
		// An old receipt is not a forged one: judged when it was signed,
		// its expired certificate reported apart.
		{"received after the certificate expired", signed, ca.Pool(), afterExpiry, pec.SignatureValid, signerName, ""},
		{
			"tampered, after the certificate expired", ca.Receipt(t, pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, Tamper: true}),
			ca.Pool(), afterExpiry, pec.SignatureInvalid, signerName, "altered",
		},
		{
			"tampered", ca.Receipt(t, pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, Tamper: true}),
			ca.Pool(), checkAt, pec.SignatureInvalid, signerName, "altered",
		},
		{
			"tampered, opaque", ca.Receipt(t, pectest.ReceiptOptions{Type: pec.Accettazione, Tamper: true, Opaque: true}),
			ca.Pool(), checkAt, pec.SignatureInvalid, signerName, "altered",
		},
		{"not checked without roots", signed, nil, checkAt, pec.SignatureNotChecked, signerName, "no trust roots"},
		{
			"unsigned", ca.Receipt(t, pectest.ReceiptOptions{Type: pec.Accettazione, Unsigned: true}),
			ca.Pool(), checkAt, pec.SignatureInvalid, "", "not signed",
		},
		{
			"unsigned, no roots", ca.Receipt(t, pectest.ReceiptOptions{Type: pec.Accettazione, Unsigned: true}),
			nil, checkAt, pec.SignatureNotChecked, "", "not signed",
		},
		{
			"signature part missing", bytes.Split(signed, []byte("\r\nContent-Disposition: attachment; filename=smime.p7s"))[0],
			ca.Pool(), checkAt, pec.SignatureInvalid, "", "signature part",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := pec.Parse(tt.raw, pec.Options{Roots: tt.roots, Now: tt.now})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			s := r.Signature
			if s.Status != tt.status || s.Signer != tt.signer || !strings.Contains(s.Error, tt.errWith) ||
				(tt.errWith == "" && s.Error != "") {
				t.Errorf("signature = %+v, want %q by %q with error %q", s, tt.status, tt.signer, tt.errWith)
			}
			if expired := tt.status == pec.SignatureValid && tt.now.After(ca.Signer.NotAfter); expired != s.CertificateExpired.Equal(ca.Signer.NotAfter) ||
				!expired && !s.CertificateExpired.IsZero() {
				t.Errorf("certificate expired = %v, want it said exactly when a valid receipt was received after %v", s.CertificateExpired, ca.Signer.NotAfter)
			}
			// Whatever the signature, the receipt is read.
			if r.Type == "" || r.Keys.Identificativo == "" {
				t.Errorf("type %q, keys %+v", r.Type, r.Keys)
			}
		})
	}
}

func TestLoadTrustBundle(t *testing.T) {
	ca := pectest.NewCA(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	key := "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"

	tests := []struct {
		name    string
		path    string
		errWith string
	}{
		{"one root", ca.BundleFile(t), ""},
		{"roots among other blocks", write("mixed.pem", key+string(ca.RootPEM())+string(pectest.NewCA(t).RootPEM())), ""},
		{"missing", filepath.Join(dir, "nope.pem"), "nope.pem"},
		{"no certificate", write("key.pem", key), "key.pem: no PEM certificate"},
		{"not PEM", write("der.pem", "just text\n"), "der.pem: no PEM certificate"},
		{"bad certificate", write("bad.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), "bad.pem: certificate 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pool, err := pec.LoadTrustBundle(tt.path)
			if tt.errWith == "" {
				if err != nil || pool == nil {
					t.Fatalf("LoadTrustBundle = %v, %v", pool, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errWith) {
				t.Fatalf("LoadTrustBundle error = %v, want one with %q", err, tt.errWith)
			}
		})
	}
}

// A signature without a signing time is judged at daticert.xml's data,
// which the signature covers, not at the receipt's Date, which anyone
// forwarding it can rewrite: an old receipt whose Date was moved on is
// valid, a receipt signed after its certificate expired, its Date set back
// to a time the certificate was valid, is not.
func TestSignatureWithoutSigningTime(t *testing.T) {
	ca := pectest.NewCA(t)
	day := 24 * time.Hour
	withDate := func(raw []byte, d time.Time) []byte {
		i := bytes.Index(raw, []byte("\r\nDate: ")) + 2
		j := i + bytes.Index(raw[i:], []byte("\r\n"))
		return slices.Concat(raw[:i], []byte("Date: "+d.Format(time.RFC1123Z)), raw[j:])
	}
	tests := []struct {
		name            string
		emitted, header time.Time
		status          pec.SignatureStatus
	}{
		{"an old receipt, its Date moved past the certificate", sent, afterExpiry, pec.SignatureValid},
		{"signed after the certificate expired, its Date set back", afterExpiry, sent, pec.SignatureInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := ca.Receipt(t, pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, Date: tt.emitted, NoSigningTime: true})
			r, err := pec.Parse(withDate(raw, tt.header), pec.Options{Roots: ca.Pool(), Now: afterExpiry.Add(day)})
			if err != nil {
				t.Fatal(err)
			}
			if !r.Date.Equal(tt.header) {
				t.Fatalf("the receipt's Date is %v, want the rewritten %v", r.Date, tt.header)
			}
			if s := r.Signature; s.Status != tt.status || s.SignedAtFrom != "daticert" {
				t.Errorf("signature %+v, want %s judged at daticert's data", s, tt.status)
			}
		})
	}
}

// A provider's clock a little ahead of the relay's does not make a genuine
// receipt under a new certificate read as forged.
func TestSignatureClockSkew(t *testing.T) {
	now := time.Now()
	ca := pectest.NewCAFrom(t, now.Add(-30*time.Second))
	raw := ca.Receipt(t, pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, Date: now})
	for _, tt := range []struct {
		name   string
		behind time.Duration
		status pec.SignatureStatus
	}{
		{"the relay's clock 2 minutes behind", 2 * time.Minute, pec.SignatureValid},
		{"received an hour before the certificate was issued", time.Hour, pec.SignatureInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := pec.Parse(raw, pec.Options{Roots: ca.Pool(), Now: now.Add(-tt.behind)})
			if err != nil {
				t.Fatal(err)
			}
			if r.Signature.Status != tt.status {
				t.Errorf("signature %+v, want %s", r.Signature, tt.status)
			}
		})
	}
}
