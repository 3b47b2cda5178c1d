package pec

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
)

// LoadTrustBundle reads a PEM file of the certificate authorities that sign
// PEC providers' certificates (for Italy, the list AgID publishes). Blocks
// other than CERTIFICATE are skipped; a file without any certificate is an
// error, since it would make every signature invalid.
func LoadTrustBundle(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pec: trust bundle: %w", err)
	}
	pool := x509.NewCertPool()
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		n++
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("pec: trust bundle %s: certificate %d: %w", path, n, err)
		}
		pool.AddCert(cert)
	}
	if n == 0 {
		return nil, fmt.Errorf("pec: trust bundle %s: no PEM certificate in it", path)
	}
	return pool, nil
}
