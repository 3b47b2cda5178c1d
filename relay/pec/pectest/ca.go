// Package pectest builds PEC receipts as a provider would, signed by a
// throwaway certificate authority, for tests of code that reads them.
package pectest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// ProviderAddress is the address the test provider sends receipts from,
// and the e-mail address of its signing certificate.
const ProviderAddress = "posta-certificata@pec.provider.test"

// CA is a test certificate authority and the provider certificate it
// issued, whose key signs receipts.
type CA struct {
	// Root is the self-signed authority a trust bundle holds.
	Root *x509.Certificate
	// Signer is the provider's signing certificate, issued by Root.
	Signer *x509.Certificate

	signerKey crypto.Signer
}

// NewCA makes a root and a provider certificate for ProviderAddress. It uses
// ECDSA P-256 keys: they take microseconds to make, where RSA takes
// noticeable time under the race detector.
func NewCA(t testing.TB) *CA {
	t.Helper()
	// Certificates are valid for this whole century so that receipts
	// written to testdata keep verifying, whatever day the tests run on.
	return NewCAFrom(t, time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC))
}

// NewCAFrom is NewCA with certificates issued at validFrom, as a provider's
// new certificate is.
func NewCAFrom(t testing.TB, validFrom time.Time) *CA {
	t.Helper()
	validTo := time.Date(2099, time.December, 31, 23, 59, 59, 0, time.UTC)

	rootKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("pectest: root key: %v", err)
	}
	rootTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "PEC Test Root CA", Organization: []string{"pectest"}, Country: []string{"IT"}},
		NotBefore:             validFrom,
		NotAfter:              validTo,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, rootKey.Public(), rootKey)
	if err != nil {
		t.Fatalf("pectest: root certificate: %v", err)
	}
	root, err := x509.ParseCertificate(rootDER)
	if err != nil {
		t.Fatalf("pectest: root certificate: %v", err)
	}

	signerKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("pectest: provider key: %v", err)
	}
	signerTmpl := &x509.Certificate{
		SerialNumber:   big.NewInt(2),
		Subject:        pkix.Name{CommonName: "Posta Certificata Provider Test", Organization: []string{"Provider Test S.p.A."}, Country: []string{"IT"}},
		EmailAddresses: []string{ProviderAddress},
		NotBefore:      validFrom,
		NotAfter:       validTo,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageEmailProtection},
	}
	signerDER, err := x509.CreateCertificate(rand.Reader, signerTmpl, root, signerKey.Public(), rootKey)
	if err != nil {
		t.Fatalf("pectest: provider certificate: %v", err)
	}
	signer, err := x509.ParseCertificate(signerDER)
	if err != nil {
		t.Fatalf("pectest: provider certificate: %v", err)
	}
	return &CA{Root: root, Signer: signer, signerKey: signerKey}
}

// Pool returns a new pool holding the root, for pec.Options.Roots.
func (ca *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Root)
	return pool
}

// RootPEM returns the root certificate in PEM form, as a trust bundle
// holds it.
func (ca *CA) RootPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Root.Raw})
}

// BundleFile writes the root to a PEM file in a temporary directory removed
// when the test ends, and returns its path.
func (ca *CA) BundleFile(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pec-roots.pem")
	if err := os.WriteFile(path, ca.RootPEM(), 0o644); err != nil {
		t.Fatalf("pectest: %v", err)
	}
	return path
}
