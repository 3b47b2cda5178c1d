package pec

import (
	"bufio"
	"bytes"
	"crypto/x509"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/textproto"
	"github.com/smallstep/pkcs7"
)

// oidEmailAddress is the PKCS #9 emailAddress attribute some providers put
// in the subject of their signing certificate instead of a SAN.
var oidEmailAddress = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}

// checkSignature checks the S/MIME signature a provider puts over the whole
// message. For an opaque signature (application/pkcs7-mime) it also returns
// the signed content, since the receipt is inside it.
//
// at is the time validity is judged at when the signature carries no
// signing time: daticert's data, or the receipt's Date.
func checkSignature(raw []byte, h message.Header, at judgedAt, opts Options) (Signature, []byte) {
	if !isSigned(h) {
		return unsigned(opts)
	}
	mediaType, params, _ := h.ContentType()
	if mediaType == "multipart/signed" {
		signed, der, err := splitSigned(raw, params["boundary"])
		if err != nil {
			return broken(err, opts), nil
		}
		sig, _ := verify(der, signed, at, opts)
		return sig, nil
	}
	if t := strings.ToLower(params["smime-type"]); t != "" && t != "signed-data" {
		return broken(fmt.Errorf("smime-type %s is not a signature", t), opts), nil
	}
	e, err := message.Read(bytes.NewReader(raw))
	if err != nil && !softError(err) {
		return broken(err, opts), nil
	}
	der, err := io.ReadAll(e.Body)
	if err != nil {
		return broken(fmt.Errorf("reading the signature: %w", err), opts), nil
	}
	return verify(der, nil, at, opts)
}

// isSigned reports whether h is the header of an S/MIME signed entity:
// multipart/signed with a PKCS #7 signature, or application/pkcs7-mime.
func isSigned(h message.Header) bool {
	mediaType, params, err := h.ContentType()
	if err != nil {
		return false
	}
	return mediaType == "multipart/signed" && isPKCS7(params["protocol"], "signature") || isPKCS7(mediaType, "mime")
}

// isPKCS7 reports whether mediaType is application/pkcs7-<kind> or its
// pre-RFC 5751 spelling application/x-pkcs7-<kind>, which most PEC
// providers still use.
func isPKCS7(mediaType, kind string) bool {
	mediaType = strings.ToLower(strings.TrimSpace(mediaType))
	return mediaType == "application/pkcs7-"+kind || mediaType == "application/x-pkcs7-"+kind
}

func unsigned(opts Options) (Signature, []byte) {
	if opts.Roots == nil {
		return Signature{Status: SignatureNotChecked, Error: "message is not signed"}, nil
	}
	return Signature{Status: SignatureInvalid, Error: "message is not signed"}, nil
}

// broken reports a signature that could not even be read: invalid when
// the caller asked for a check, not checked otherwise.
func broken(err error, opts Options) Signature {
	if opts.Roots == nil {
		return Signature{Status: SignatureNotChecked, Error: err.Error()}
	}
	return Signature{Status: SignatureInvalid, Error: err.Error()}
}

// splitSigned returns the first part of a multipart/signed body exactly as
// it was signed, header included and in canonical CRLF form, and the
// transfer-decoded signature of the second part.
func splitSigned(raw []byte, boundary string) (signed, der []byte, err error) {
	if boundary == "" {
		return nil, nil, errors.New("multipart/signed without a boundary")
	}
	br := bufio.NewReader(bytes.NewReader(raw))
	if _, err := textproto.ReadHeader(br); err != nil {
		return nil, nil, err
	}
	mr := textproto.NewMultipartReader(br, boundary)

	p, err := mr.NextPart()
	if err != nil {
		return nil, nil, fmt.Errorf("reading the signed part: %w", err)
	}
	// textproto keeps every header field as it came, so writing the header
	// back gives the signed bytes, not a reformatted copy.
	var buf bytes.Buffer
	if err := textproto.WriteHeader(&buf, p.Header); err != nil {
		return nil, nil, fmt.Errorf("reading the signed part: %w", err)
	}
	if _, err := io.Copy(&buf, p); err != nil {
		return nil, nil, fmt.Errorf("reading the signed part: %w", err)
	}
	// S/MIME signs the canonical form (RFC 8551, section 3.1.1), but
	// mailboxes often store messages with bare LF line ends.
	signed = canonicalCRLF(buf.Bytes())

	p, err = mr.NextPart()
	if err != nil {
		return nil, nil, fmt.Errorf("reading the signature part: %w", err)
	}
	if t, _, _ := (&message.Header{Header: p.Header}).ContentType(); !isPKCS7(t, "signature") {
		return nil, nil, fmt.Errorf("the signature part is %s, not a PKCS #7 signature", t)
	}
	e, err := message.New(message.Header{Header: p.Header}, p)
	if err != nil && !softError(err) {
		return nil, nil, fmt.Errorf("reading the signature part: %w", err)
	}
	if der, err = io.ReadAll(e.Body); err != nil {
		return nil, nil, fmt.Errorf("reading the signature part: %w", err)
	}
	return signed, der, nil
}

// canonicalCRLF turns every bare LF into CRLF, leaving CRLF alone.
func canonicalCRLF(b []byte) []byte {
	out := make([]byte, 0, len(b)+bytes.Count(b, []byte{'\n'}))
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			out = append(out, '\r')
		}
		out = append(out, c)
	}
	return out
}

// verify checks a PKCS #7 signature over content (nil when the signature
// holds its content) against opts.Roots, and returns the signed content.
//
// The chain is judged at the time the receipt was signed (its signing-time
// attribute, else at), not now: a provider's certificate expires, and
// the receipts it signed while it was valid stay proof. A certificate that
// has expired by opts.Now (when the receipt was received; now when zero)
// is reported in CertificateExpired beside a valid status, apart from a
// tampered or untrusted signature, which is invalid. A receipt received
// before its certificate was issued is invalid.
func verify(der, content []byte, at judgedAt, opts Options) (Signature, []byte) {
	p7, err := parsePKCS7(der)
	if err != nil {
		return broken(fmt.Errorf("reading the signature: %w", err), opts), nil
	}
	if content == nil {
		content = p7.Content
	} else {
		p7.Content = content
	}
	sig := Signature{Signer: signerName(p7)}
	if opts.Roots == nil {
		sig.Status, sig.Error = SignatureNotChecked, "no trust roots given"
		return sig, content
	}
	received := opts.Now
	if received.IsZero() {
		received = time.Now()
	}
	signedAt, from := signingTime(p7), "signing time"
	if signedAt.IsZero() {
		signedAt, from = at.t, at.from
	}
	if signedAt.IsZero() || signedAt.After(received.Add(clockSkew)) {
		signedAt, from = received, "received"
	}
	sig.SignedAtFrom = from
	if err := verifyPKCS7(p7, opts.Roots, signedAt); err != nil {
		sig.Status, sig.Error = SignatureInvalid, describe(err)
		return sig, content
	}
	// The chain held at signedAt, which is at most clockSkew after
	// received: a receipt received before its certificate was issued has
	// failed there.
	ee := p7.GetOnlySigner()
	sig.Status, sig.SignedAt = SignatureValid, signedAt
	if ee != nil && received.After(ee.NotAfter) {
		sig.CertificateExpired = ee.NotAfter
	}
	return sig, content
}

// clockSkew is how far a provider's clock may run ahead of this relay's: a
// receipt signed, or under a certificate issued, a little "after" it was
// received here is genuine, not forged.
const clockSkew = 5 * time.Minute

// judgedAt is the time a signature without a signing time is judged at,
// and where it was read.
type judgedAt struct {
	t    time.Time
	from string
}

// signingTime is the signing-time attribute of the first signer, or zero.
func signingTime(p7 *pkcs7.PKCS7) (t time.Time) {
	defer func() {
		if recover() != nil {
			t = time.Time{}
		}
	}()
	if p7.UnmarshalSignedAttribute(pkcs7.OIDAttributeSigningTime, &t) != nil {
		return time.Time{}
	}
	return t
}

// parsePKCS7 parses untrusted DER. Parse promises never to panic, and that
// promise should not rest on a third-party ASN.1 reader being flawless.
func parsePKCS7(der []byte) (p7 *pkcs7.PKCS7, err error) {
	defer func() {
		if r := recover(); r != nil {
			p7, err = nil, fmt.Errorf("malformed PKCS #7 (%v)", r)
		}
	}()
	return pkcs7.Parse(der)
}

// verifyPKCS7 is p7.VerifyWithChainAtTime, with parsePKCS7's safety net.
func verifyPKCS7(p7 *pkcs7.PKCS7, roots *x509.CertPool, now time.Time) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("malformed PKCS #7 (%v)", r)
		}
	}()
	return p7.VerifyWithChainAtTime(roots, now)
}

// describe turns pkcs7's errors into one line.
func describe(err error) string {
	var mismatch *pkcs7.MessageDigestMismatchError
	if errors.As(err, &mismatch) {
		return "content does not match the signature: altered after signing"
	}
	return err.Error()
}

// signerName names the certificate of the first signer.
func signerName(p7 *pkcs7.PKCS7) string {
	if len(p7.Signers) == 0 {
		return ""
	}
	ias := p7.Signers[0].IssuerAndSerialNumber
	for _, c := range p7.Certificates {
		if ias.SerialNumber != nil && c.SerialNumber.Cmp(ias.SerialNumber) == 0 &&
			bytes.Equal(c.RawIssuer, ias.IssuerName.FullBytes) {
			return certName(c)
		}
	}
	return ""
}

// certName is the certificate's common name and e-mail address, as in
// "Posta Certificata ARUBA PEC <posta-certificata@pec.aruba.it>".
func certName(c *x509.Certificate) string {
	var email string
	if len(c.EmailAddresses) > 0 {
		email = c.EmailAddresses[0]
	} else {
		for _, n := range c.Subject.Names {
			if s, ok := n.Value.(string); ok && n.Type.Equal(oidEmailAddress) {
				email = s
				break
			}
		}
	}
	cn := c.Subject.CommonName
	switch {
	case cn != "" && email != "":
		return cn + " <" + email + ">"
	case cn != "":
		return cn
	case email != "":
		return email
	}
	return c.Subject.String()
}
