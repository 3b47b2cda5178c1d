// Package testcert makes throw-away TLS certificates for tests: a CA and a
// server certificate for localhost and 127.0.0.1 signed by it.
package testcert

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Pair is a server certificate and the pool that trusts its CA.
type Pair struct {
	Cert tls.Certificate
	// Leaf is the server certificate, CA its authority's.
	Leaf, CA *x509.Certificate
	Pool     *x509.CertPool
	// CertFile and KeyFile hold the certificate and key in PEM, CAFile the
	// authority that signed it.
	CertFile, KeyFile, CAFile string
}

// New makes a CA and a server certificate for the given names (localhost
// and 127.0.0.1 when none), written under t.TempDir().
func New(t testing.TB, names ...string) Pair {
	t.Helper()
	if len(names) == 0 {
		names = []string{"localhost", "127.0.0.1"}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Postino test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: names[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			leaf.IPAddresses = append(leaf.IPAddresses, ip)
		} else {
			leaf.DNSNames = append(leaf.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := Pair{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem"),
		CAFile: filepath.Join(dir, "ca.pem"), Pool: x509.NewCertPool()}
	if err := os.WriteFile(p.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	p.Pool.AddCert(caCert)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if err := os.WriteFile(p.CertFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.KeyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	p.Cert, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	p.Leaf, p.CA = p.Cert.Leaf, caCert
	return p
}

// ChainConfig is ServerConfig sending the CA's certificate after the
// server's, as a server whose clients check the chain by its authority's
// digest (DANE-TA) must.
func (p Pair) ChainConfig() *tls.Config {
	c := p.ServerConfig()
	chain := c.Certificates[0]
	chain.Certificate = append(chain.Certificate[:1:1], p.CA.Raw)
	c.Certificates = []tls.Certificate{chain}
	return c
}

// ServerConfig is a TLS configuration serving the certificate.
func (p Pair) ServerConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.Cert}, MinVersion: tls.VersionTLS12}
}

// ClientConfig trusts the CA.
func (p Pair) ClientConfig() *tls.Config {
	return &tls.Config{RootCAs: p.Pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
}
