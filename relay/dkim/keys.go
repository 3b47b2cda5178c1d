package dkim

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
)

// MinRSABits is the smallest RSA key accepted: RFC 8301 forbids signing
// with less than 1024 bits, and receivers increasingly distrust less than
// 2048.
const MinRSABits = 2048

// LoadKey reads a private key from a PEM file: PKCS#1 ("RSA PRIVATE KEY")
// or PKCS#8 ("PRIVATE KEY", RSA or Ed25519). A file that others than its
// owner and group may read is refused: a signing key anyone on the machine
// can copy lets anyone sign as the domain.
func LoadKey(path string) (crypto.Signer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("DKIM key %s: %w", path, err)
	}
	if perm := st.Mode().Perm(); perm&0o007 != 0 {
		return nil, fmt.Errorf("DKIM key %s is readable or writable by every user (mode %04o): anyone on this machine could sign as its domain; run chmod 600 %s (or 640 with the relay's group)",
			path, perm, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("DKIM key %s: %w", path, err)
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("DKIM key %s is not PEM: expected a -----BEGIN PRIVATE KEY----- or -----BEGIN RSA PRIVATE KEY----- block", path)
	}
	var key any
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("DKIM key %s holds a %q block: expected PRIVATE KEY (PKCS#8) or RSA PRIVATE KEY (PKCS#1)", path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("DKIM key %s cannot be parsed: %w", path, err)
	}
	switch k := key.(type) {
	case *rsa.PrivateKey:
		if bits := k.N.BitLen(); bits < MinRSABits {
			return nil, fmt.Errorf("DKIM key %s is RSA of %d bits: use %d or more (postino dkim keygen makes one)", path, bits, MinRSABits)
		}
		return k, nil
	case ed25519.PrivateKey:
		return k, nil
	default:
		return nil, fmt.Errorf("DKIM key %s is a %T: DKIM signs with RSA or Ed25519", path, key)
	}
}

// GenerateKey makes a new key: algorithm rsa (of bits, 2048 when 0) or
// ed25519.
func GenerateKey(algorithm string, bits int) (crypto.Signer, error) {
	switch algorithm {
	case "rsa":
		if bits == 0 {
			bits = MinRSABits
		}
		if bits < MinRSABits || bits > 8192 {
			return nil, fmt.Errorf("RSA keys of %d bits: use %d to 8192", bits, MinRSABits)
		}
		return rsa.GenerateKey(rand.Reader, bits)
	case "ed25519":
		if bits != 0 {
			return nil, errors.New("Ed25519 keys have no size: leave out --bits")
		}
		_, k, err := ed25519.GenerateKey(rand.Reader)
		return k, err
	default:
		return nil, fmt.Errorf("algorithm %q: use rsa or ed25519", algorithm)
	}
}

// WriteKey writes key to a new file, PKCS#8 PEM, readable by its owner
// only. An existing file is never replaced: it may be the key in use.
func WriteKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists: choose another selector or directory; a key file is never overwritten", path)
	}
	if err != nil {
		return err
	}
	if err := pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	return f.Close()
}

// Record is the TXT record that publishes key's public half: for RSA the
// SubjectPublicKeyInfo (RFC 6376 section 3.6.1), for Ed25519 the raw 32
// bytes (RFC 8463 section 4.2).
func Record(key crypto.Signer) (string, error) {
	switch pub := key.Public().(type) {
	case *rsa.PublicKey:
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			return "", err
		}
		return "v=DKIM1; k=rsa; p=" + base64.StdEncoding.EncodeToString(der), nil
	case ed25519.PublicKey:
		return "v=DKIM1; k=ed25519; p=" + base64.StdEncoding.EncodeToString(pub), nil
	default:
		return "", fmt.Errorf("unsupported key type %T", pub)
	}
}

// RecordName is where a selector's record lives.
func RecordName(domain, selector string) string {
	return selector + "._domainkey." + domain
}

// ZoneLine is the record as a line of a zone file: the value cut into
// quoted strings of at most 255 octets, as DNS requires of each string of
// a TXT record (RFC 1035 section 3.3).
func ZoneLine(domain, selector, record string) string {
	var parts []string
	for len(record) > 255 {
		parts = append(parts, `"`+record[:255]+`"`)
		record = record[255:]
	}
	parts = append(parts, `"`+record+`"`)
	return fmt.Sprintf("%s. IN TXT %s", RecordName(domain, selector), strings.Join(parts, " "))
}
