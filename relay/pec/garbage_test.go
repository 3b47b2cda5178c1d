package pec_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/internal/testrig/corpus"
	"github.com/genropy/postino/relay/pec"
	"github.com/genropy/postino/relay/pec/pectest"
)

// parseAnything calls Parse the way a mailbox reader would, with and
// without roots, and checks the one promise that holds for any input: a
// receipt or an error, never both, never neither.
func parseAnything(t testing.TB, raw []byte, roots pec.Options) {
	t.Helper()
	for _, opts := range []pec.Options{{}, roots} {
		r, err := pec.Parse(raw, opts)
		if (r == nil) == (err == nil) {
			t.Fatalf("Parse(%.60q) = %v, %v", raw, r, err)
		}
	}
}

func TestGarbage(t *testing.T) {
	ca := pectest.NewCA(t)
	withRoots := pec.Options{Roots: ca.Pool(), Now: checkAt}

	t.Run("not a message", func(t *testing.T) {
		for _, raw := range []string{"", "\r\n", "\x00\x01\x02", "no colon here\r\n\r\nbody", " leading space: x\r\n"} {
			if r, err := pec.Parse([]byte(raw), pec.Options{}); err == nil {
				t.Errorf("Parse(%q) = %+v, want an error", raw, r)
			}
		}
	})

	t.Run("header only", func(t *testing.T) {
		r, err := pec.Parse([]byte("X-Ricevuta: accettazione\r\nX-Riferimento-Message-ID: <a@b>"), withRoots)
		if err != nil {
			t.Fatal(err)
		}
		if r.Type != pec.Accettazione || r.Keys.MessageID != "a@b" || r.DaticertError != "no daticert.xml" ||
			r.Signature.Status != pec.SignatureInvalid {
			t.Errorf("receipt = %+v", r)
		}
	})

	t.Run("random bytes", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 2))
		for i := range 300 {
			raw := make([]byte, rng.IntN(2048))
			for j := range raw {
				raw[j] = byte(rng.UintN(256))
			}
			if i%3 == 0 {
				// Give some of them a header, to get past the first check.
				raw = append([]byte("Content-Type: multipart/signed; protocol=\"application/pkcs7-signature\"; boundary=x\r\n\r\n--x\r\n"), raw...)
			}
			parseAnything(t, raw, withRoots)
		}
	})

	t.Run("deeply nested multipart", func(t *testing.T) {
		var b strings.Builder
		const depth = 5000
		for i := range depth {
			fmt.Fprintf(&b, "Content-Type: multipart/mixed; boundary=b%d\r\n\r\n--b%d\r\n", i, i)
		}
		b.WriteString("Content-Type: application/xml; name=daticert.xml\r\n\r\n<postacert tipo=\"accettazione\"/>\r\n")
		for i := depth - 1; i >= 0; i-- {
			fmt.Fprintf(&b, "--b%d--\r\n", i)
		}
		start := time.Now()
		r, err := pec.Parse([]byte("From: x@y\r\n"+b.String()), pec.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Daticert != nil {
			t.Errorf("found a daticert %d levels down", depth)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %v", d)
		}
	})

	t.Run("broken signatures", func(t *testing.T) {
		head := "From: posta-certificata@p.test\r\nX-Ricevuta: accettazione\r\n" +
			"Content-Type: multipart/signed; protocol=\"application/pkcs7-signature\"; boundary=\"b\"\r\n\r\n"
		signedPart := "--b\r\nContent-Type: text/plain\r\n\r\nciao\r\n"
		for name, raw := range map[string]string{
			"no boundary":   strings.Replace(head, "; boundary=\"b\"", "", 1) + signedPart,
			"one part":      head + signedPart + "--b--\r\n",
			"not base64":    head + signedPart + "--b\r\nContent-Type: application/pkcs7-signature\r\nContent-Transfer-Encoding: base64\r\n\r\n!!!\r\n--b--\r\n",
			"not PKCS #7":   head + signedPart + "--b\r\nContent-Type: application/pkcs7-signature\r\nContent-Transfer-Encoding: base64\r\n\r\naGVsbG8=\r\n--b--\r\n",
			"empty":         head + signedPart + "--b\r\nContent-Type: application/pkcs7-signature\r\n\r\n\r\n--b--\r\n",
			"wrong type":    head + signedPart + "--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--\r\n",
			"no end":        head + "--b\r\nContent-Type: text/plain\r\n\r\nciao",
			"opaque junk":   "X-Ricevuta: accettazione\r\nContent-Type: application/pkcs7-mime; smime-type=signed-data\r\nContent-Transfer-Encoding: base64\r\n\r\nMIIB\r\n",
			"opaque sealed": "X-Ricevuta: accettazione\r\nContent-Type: application/pkcs7-mime; smime-type=enveloped-data\r\n\r\nx\r\n",
		} {
			t.Run(name, func(t *testing.T) {
				for _, opts := range []pec.Options{{}, withRoots} {
					r, err := pec.Parse([]byte(raw), opts)
					if err != nil {
						t.Fatalf("Parse: %v", err)
					}
					want := pec.SignatureInvalid
					if opts.Roots == nil {
						want = pec.SignatureNotChecked
					}
					if r.Type != pec.Accettazione || r.Signature.Status != want || r.Signature.Error == "" {
						t.Errorf("type %q, signature %+v; want %q with a reason", r.Type, r.Signature, want)
					}
				}
			})
		}
	})

	t.Run("every prefix of a receipt", func(t *testing.T) {
		raw := ca.Receipt(t, pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, DaticertEncoding: "quoted-printable"})
		for i := 0; i < len(raw); i += 37 {
			parseAnything(t, raw[:i], withRoots)
		}
	})
}

// FuzzParse checks that no input makes Parse panic or break its contract.
func FuzzParse(f *testing.F) {
	ca := pectest.NewCA(f)
	for _, typ := range []pec.Type{pec.Accettazione, pec.AvvenutaConsegna, pec.PostaCertificata} {
		f.Add(ca.Receipt(f, pectest.ReceiptOptions{Type: typ}))
	}
	f.Add(ca.Receipt(f, pectest.ReceiptOptions{Type: pec.ErroreConsegna, Opaque: true}))
	f.Add(ca.Receipt(f, pectest.ReceiptOptions{Type: pec.Accettazione, DaticertEncoding: "quoted-printable", Unsigned: true}))
	corpus.AddFiles(f, filepath.Join("testdata", "*.eml"))
	f.Add(bytes.Repeat([]byte("Content-Type: multipart/mixed; boundary=a\r\n\r\n--a\r\n"), 50))
	opts := pec.Options{Roots: ca.Pool(), Now: checkAt}
	f.Fuzz(func(t *testing.T, raw []byte) {
		parseAnything(t, raw, opts)
	})
}
