package pec_test

import (
	"bytes"
	"crypto/x509"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-message"
	"github.com/smallstep/pkcs7"

	"github.com/genropy/postino/internal/testrig/corpus"
	"github.com/genropy/postino/relay/pec"
)

func TestRealCorpus(t *testing.T) {
	dir := corpus.Dir(t, "pec-real")
	cet := time.FixedZone("", 3600)
	aruba := "Posta Certificata ARUBA PEC <posta-certificata@pec.aruba.it>"
	sogei := "Posta Certificata Sogei <posta-certificata@pcert.sogei.it>"
	battistini := []pec.Recipient{{Address: "l.battistini@pec.it", Type: "certificato"}}

	tests := map[string]struct {
		typ          pec.Type
		source       pec.Source
		keys         pec.Keys
		tipoRicevuta string
		mittente     string
		destinatari  []pec.Recipient
		data         time.Time
		ricevuta     string
		consegna     string
		signer       string
		// valid says whether the signature holds against the signer's own
		// CA, checked at the receipt's date. The Sogei files lost a
		// trailing space when they were stored, which breaks their
		// signature: restore says where to put it back, and valid is then
		// about the restored bytes.
		valid   bool
		restore [2]string
	}{
		"aruba-accettazione.eml": {
			typ: pec.Accettazione, source: pec.FromBoth,
			keys: pec.Keys{
				MessageID:      "1542123565.921546936035156.464602125997431-openerp-8-fatturapa.attachment.out@elbati-Vostro-3550",
				Identificativo: "opec288.20181113163926.01838.310.1.63@pec.aruba.it",
			},
			mittente: "l.battistini@pec.it", destinatari: battistini,
			data:   time.Date(2018, 11, 13, 16, 39, 26, 0, cet),
			signer: aruba, valid: true,
		},
		"aruba-avvenuta-consegna-completa.eml": {
			typ: pec.AvvenutaConsegna, source: pec.FromBoth,
			keys: pec.Keys{
				MessageID:      "1542123565.921546936035156.464602125997431-openerp-8-fatturapa.attachment.out@elbati-Vostro-3550",
				Identificativo: "opec288.20181113163926.01838.310.1.63@pec.aruba.it",
			},
			tipoRicevuta: "completa", // from daticert: Aruba sends no X-TipoRicevuta
			mittente:     "l.battistini@pec.it", destinatari: battistini,
			data:     time.Date(2018, 11, 13, 16, 39, 27, 0, cet),
			ricevuta: "completa", consegna: "l.battistini@pec.it",
			signer: aruba, valid: true,
		},
		"sogei-posta-certificata-1.eml": {
			typ: pec.PostaCertificata, source: pec.FromBoth,
			keys: pec.Keys{
				MessageID:      "4163125586355393.1544268377979@pec.fatturapa.it",
				Identificativo: "opec288.20181208122618.17535.2665.1.3@pcert.sogei.it",
			},
			tipoRicevuta: "breve", // X-Tiporicevuta, so spelt
			mittente:     "sdi03@pec.fatturapa.it", destinatari: battistini,
			data:     time.Date(2018, 12, 8, 12, 26, 18, 0, cet),
			ricevuta: "breve",
			signer:   sogei, valid: true,
			restore: [2]string{"multipart/mixed;\n\tboundary", "multipart/mixed; \n\tboundary"},
		},
		"sogei-posta-certificata-2.eml": {
			typ: pec.PostaCertificata, source: pec.FromBoth,
			keys: pec.Keys{
				MessageID:      "5168561142842364.1542124052746@pec.fatturapa.it",
				Identificativo: "opec288.20181113164732.05177.8374.1.1@pcert.sogei.it",
			},
			tipoRicevuta: "breve",
			mittente:     "sdi03@pec.fatturapa.it", destinatari: battistini,
			data:     time.Date(2018, 11, 13, 16, 47, 32, 0, cet),
			ricevuta: "breve",
			signer:   sogei, valid: true,
			restore: [2]string{"multipart/mixed;\n\tboundary", "multipart/mixed; \n\tboundary"},
		},
		// Despite its name, this file's daticert.xml is sound: what does
		// not parse is the invoice in postacert.eml, edited after signing,
		// so its signature fails even with the whitespace restored.
		"sogei-posta-certificata-broken-xml.eml": {
			typ: pec.PostaCertificata, source: pec.FromBoth,
			keys: pec.Keys{
				MessageID:      "4163125586355393.1544268377979@pec.fatturapa.it",
				Identificativo: "opec288.20181208122618.17535.2665.1.3@pcert.sogei.it",
			},
			tipoRicevuta: "breve",
			mittente:     "sdi03@pec.fatturapa.it", destinatari: battistini,
			data:     time.Date(2018, 12, 8, 12, 26, 18, 0, cet),
			ricevuta: "breve",
			signer:   sogei, valid: false,
			restore: [2]string{"multipart/mixed;\n\tboundary", "multipart/mixed; \n\tboundary"},
		},
	}

	files, err := filepath.Glob(filepath.Join(dir, "*.eml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no .eml in %s (%v)", dir, err)
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(name, func(t *testing.T) {
			tt, ok := tests[name]
			if !ok {
				t.Fatalf("no expectations for %s: add it to the table", name)
			}
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			r, err := pec.Parse(raw, pec.Options{})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if r.Type != tt.typ || r.Source != tt.source || r.Fields["type"] != pec.FromHeaders {
				t.Errorf("type %q (from %q), source %q; want %q from headers, %q", r.Type, r.Fields["type"], r.Source, tt.typ, tt.source)
			}
			if r.Keys != tt.keys {
				t.Errorf("keys = %+v, want %+v", r.Keys, tt.keys)
			}
			// The signed daticert.xml's msgid wins over the header, and
			// the two agree in every real receipt.
			msgFrom := pec.FromHeaders
			if r.Daticert != nil && r.Daticert.MsgID != "" {
				msgFrom = pec.FromDaticert
			}
			if r.Fields["message_id"] != msgFrom || r.Fields["identificativo"] != pec.FromDaticert || r.MessageIDConflict != "" {
				t.Errorf("message_id from %q (want %q), identificativo from %q, conflict %q", r.Fields["message_id"], msgFrom, r.Fields["identificativo"], r.MessageIDConflict)
			}
			if r.TipoRicevuta != tt.tipoRicevuta {
				t.Errorf("tipo ricevuta = %q, want %q", r.TipoRicevuta, tt.tipoRicevuta)
			}
			if r.DaticertError != "" || r.Daticert == nil {
				t.Fatalf("daticert error: %q", r.DaticertError)
			}
			d := r.Daticert
			if d.Tipo != string(tt.typ) || d.Errore != "nessuno" || d.Mittente != tt.mittente ||
				!reflect.DeepEqual(d.Destinatari, tt.destinatari) || d.Ricevuta != tt.ricevuta || d.Consegna != tt.consegna {
				t.Errorf("daticert = %+v", d)
			}
			if d.MsgID != tt.keys.MessageID || d.Identificativo != tt.keys.Identificativo {
				t.Errorf("daticert msgid %q, identificativo %q", d.MsgID, d.Identificativo)
			}
			if _, off := d.Data.Zone(); !d.Data.Equal(tt.data) || off != 3600 {
				t.Errorf("daticert data = %v, want %v at +0100", d.Data, tt.data)
			}
			if s := r.Signature; s.Status != pec.SignatureNotChecked || s.Signer != tt.signer {
				t.Errorf("signature without roots = %+v, want not checked by %q", s, tt.signer)
			}

			// Against the provider's own CA, at the time it signed, the
			// signature holds exactly where the bytes are still the
			// signed ones.
			opts := pec.Options{Roots: embeddedCAs(t, raw), Now: r.Date}
			checked, err := pec.Parse(raw, opts)
			if err != nil {
				t.Fatal(err)
			}
			wantStatus := pec.SignatureValid
			if tt.restore[0] != "" {
				wantStatus = pec.SignatureInvalid
			}
			if s := checked.Signature; s.Status != wantStatus || s.Signer != tt.signer {
				t.Errorf("signature = %+v, want %q", s, wantStatus)
			}
			// Read today, long after the providers' certificates
			// expired, the same: judged at the time it was signed.
			today, err := pec.Parse(raw, pec.Options{Roots: opts.Roots})
			if err != nil {
				t.Fatal(err)
			}
			if s := today.Signature; s.Status != wantStatus {
				t.Errorf("signature read today = %+v, want %q", s, wantStatus)
			} else if s.Status == pec.SignatureValid && s.CertificateExpired.IsZero() {
				t.Logf("the signing certificate has not expired yet: %+v", s)
			}
			if tt.restore[0] == "" {
				return
			}
			restored := bytes.Replace(raw, []byte(tt.restore[0]), []byte(tt.restore[1]), 1)
			checked, err = pec.Parse(restored, opts)
			if err != nil {
				t.Fatal(err)
			}
			wantStatus = pec.SignatureInvalid
			if tt.valid {
				wantStatus = pec.SignatureValid
			}
			if s := checked.Signature; s.Status != wantStatus {
				t.Errorf("signature with whitespace restored = %+v, want %q", s, wantStatus)
			}
		})
	}
}

// embeddedCAs returns the CA certificates a message's signature carries.
// Trusting them proves nothing about the provider; it lets the test check
// the signature over the content, which is what the reader is tested for.
func embeddedCAs(t *testing.T, raw []byte) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	e, err := message.Read(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	mr := e.MultipartReader()
	for mr != nil {
		p, err := mr.NextPart()
		if err != nil {
			break
		}
		if ct, _, _ := p.Header.ContentType(); !strings.HasSuffix(ct, "pkcs7-signature") {
			continue
		}
		der, err := io.ReadAll(p.Body)
		if err != nil {
			t.Fatal(err)
		}
		p7, err := pkcs7.Parse(der)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p7.Certificates {
			if c.IsCA {
				pool.AddCert(c)
			}
		}
	}
	return pool
}
