package pec_test

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/genropy/postino/relay/pec"
	"github.com/genropy/postino/relay/pec/pectest"
)

var update = flag.Bool("update", false, "rewrite the signed receipts in testdata/ with a new test CA")

// generated are the testdata receipts pectest writes, signed by the CA in
// testdata/provider-ca.pem. They are kept in the repository so that a
// change in pectest cannot hide a change in the reader: rewrite them with
// go test ./pec -run TestFixtures -update.
var generated = map[string]pectest.ReceiptOptions{
	"accettazione.eml":               {Type: pec.Accettazione, Recipients: recipients},
	"avvenuta-consegna-completa.eml": {Type: pec.AvvenutaConsegna, Consegna: "uno@pec.dest.test"},
	"errore-consegna-no-dest.eml": {Type: pec.ErroreConsegna, Errore: "no-dest", Consegna: "due@pec.dest.test",
		ErroreEsteso: "5.1.1 - Utente non riconosciuto", DaticertEncoding: "quoted-printable"},
	"posta-certificata.eml":         {Type: pec.PostaCertificata, TipoRicevuta: "breve"},
	"non-accettazione.eml":          {Type: pec.NonAccettazione, ErroreEsteso: "messaggio troppo grande"},
	"presa-in-carico.eml":           {Type: pec.PresaInCarico, Recipients: recipients},
	"avvenuta-consegna-breve.eml":   {Type: pec.AvvenutaConsegna, Consegna: "due@pec.dest.test", TipoRicevuta: "breve", DaticertEncoding: "quoted-printable"},
	"preavviso-errore-consegna.eml": {Type: pec.PreavvisoErroreConsegna, Consegna: "due@pec.dest.test"},
	"rilevazione-virus.eml":         {Type: pec.RilevazioneVirus},
	"errore-consegna-virus.eml":     {Type: pec.ErroreConsegna, Errore: "virus", Consegna: "uno@pec.dest.test"},
	"anomalia-messaggio.eml":        {Type: pec.ErroreTrasporto},
}

func writeFixtures(t *testing.T) {
	ca := pectest.NewCA(t)
	if err := os.WriteFile(filepath.Join("testdata", "provider-ca.pem"), ca.RootPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, o := range generated {
		o.Original, o.Identificativo, o.Date = []byte(original), "opec-test.fixture@pec.provider.test", sent
		if err := os.WriteFile(filepath.Join("testdata", name), ca.Receipt(t, o), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFixtures(t *testing.T) {
	if *update {
		writeFixtures(t)
	}
	roots, err := pec.LoadTrustBundle(filepath.Join("testdata", "provider-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	fixtureKeys := pec.Keys{MessageID: "20240301.1234@postino.test", Identificativo: "opec-test.fixture@pec.provider.test"}
	allRecipients := func(t *testing.T, r *pec.Receipt) {
		if !reflect.DeepEqual(r.Daticert.Destinatari, recipients) {
			t.Errorf("destinatari = %+v", r.Daticert.Destinatari)
		}
	}

	tests := []struct {
		file        string
		typ         pec.Type
		source      pec.Source
		keys        pec.Keys
		identFrom   pec.Source
		signature   pec.SignatureStatus
		daticertErr string
		check       func(t *testing.T, r *pec.Receipt)
	}{
		{
			file: "accettazione.eml", typ: pec.Accettazione, source: pec.FromBoth,
			keys: fixtureKeys, identFrom: pec.FromDaticert, signature: pec.SignatureValid,
			check: allRecipients,
		},
		{
			file: "avvenuta-consegna-completa.eml", typ: pec.AvvenutaConsegna, source: pec.FromBoth,
			keys:      pec.Keys{MessageID: fixtureKeys.MessageID, Identificativo: fixtureKeys.Identificativo, MailID: "mail-42"},
			identFrom: pec.FromDaticert, signature: pec.SignatureValid,
			check: func(t *testing.T, r *pec.Receipt) {
				if r.Daticert.Consegna != "uno@pec.dest.test" || r.TipoRicevuta != "completa" {
					t.Errorf("consegna %q, tipo ricevuta %q", r.Daticert.Consegna, r.TipoRicevuta)
				}
			},
		},
		{
			file: "errore-consegna-no-dest.eml", typ: pec.ErroreConsegna, source: pec.FromBoth,
			keys: fixtureKeys, identFrom: pec.FromDaticert, signature: pec.SignatureValid,
			check: func(t *testing.T, r *pec.Receipt) {
				if d := r.Daticert; d.Errore != "no-dest" || d.Consegna != "due@pec.dest.test" || d.ErroreEsteso != "5.1.1 - Utente non riconosciuto" {
					t.Errorf("daticert = %+v", d)
				}
			},
		},
		{
			file: "posta-certificata.eml", typ: pec.PostaCertificata, source: pec.FromBoth,
			keys:      pec.Keys{MessageID: fixtureKeys.MessageID, Identificativo: fixtureKeys.Identificativo, MailID: "mail-42"},
			identFrom: pec.FromDaticert, signature: pec.SignatureValid,
			check: func(t *testing.T, r *pec.Receipt) {
				if r.TipoRicevuta != "breve" || r.MessageID != fixtureKeys.Identificativo {
					t.Errorf("tipo ricevuta %q, envelope Message-ID %q", r.TipoRicevuta, r.MessageID)
				}
			},
		},
		{
			file: "non-accettazione.eml", typ: pec.NonAccettazione, source: pec.FromBoth,
			keys: fixtureKeys, identFrom: pec.FromDaticert, signature: pec.SignatureValid,
			check: func(t *testing.T, r *pec.Receipt) {
				if d := r.Daticert; d.Errore == "nessuno" || d.ErroreEsteso != "messaggio troppo grande" {
					t.Errorf("daticert = %+v", d)
				}
			},
		},
		{
			file: "presa-in-carico.eml", typ: pec.PresaInCarico, source: pec.FromBoth,
			keys: fixtureKeys, identFrom: pec.FromDaticert, signature: pec.SignatureValid,
			check: allRecipients,
		},
		{
			file: "avvenuta-consegna-breve.eml", typ: pec.AvvenutaConsegna, source: pec.FromBoth,
			keys: fixtureKeys, identFrom: pec.FromDaticert, signature: pec.SignatureValid,
			check: func(t *testing.T, r *pec.Receipt) {
				if r.Daticert.Consegna != "due@pec.dest.test" || r.TipoRicevuta != "breve" || r.Daticert.Ricevuta != "breve" {
					t.Errorf("daticert %+v, tipo ricevuta %q", r.Daticert, r.TipoRicevuta)
				}
			},
		},
		{
			file: "preavviso-errore-consegna.eml", typ: pec.PreavvisoErroreConsegna, source: pec.FromBoth,
			keys: fixtureKeys, identFrom: pec.FromDaticert, signature: pec.SignatureValid,
			check: func(t *testing.T, r *pec.Receipt) {
				if r.Daticert.Consegna != "due@pec.dest.test" || r.Daticert.Tipo != "preavviso-errore-consegna" {
					t.Errorf("daticert %+v", r.Daticert)
				}
			},
		},
		{
			file: "rilevazione-virus.eml", typ: pec.RilevazioneVirus, source: pec.FromBoth,
			keys: fixtureKeys, identFrom: pec.FromDaticert, signature: pec.SignatureValid,
			check: func(t *testing.T, r *pec.Receipt) {
				if r.Daticert.Errore != "virus" {
					t.Errorf("daticert %+v", r.Daticert)
				}
			},
		},
		{
			file: "errore-consegna-virus.eml", typ: pec.ErroreConsegna, source: pec.FromBoth,
			keys: fixtureKeys, identFrom: pec.FromDaticert, signature: pec.SignatureValid,
			check: func(t *testing.T, r *pec.Receipt) {
				if r.Daticert.Errore != "virus" || r.Daticert.Consegna != "uno@pec.dest.test" {
					t.Errorf("daticert %+v", r.Daticert)
				}
			},
		},
		{
			file: "anomalia-messaggio.eml", typ: pec.ErroreTrasporto, source: pec.FromHeaders,
			keys:      pec.Keys{MessageID: fixtureKeys.MessageID, Identificativo: fixtureKeys.Identificativo, MailID: "mail-42"},
			identFrom: pec.FromBody, signature: pec.SignatureValid, daticertErr: "no daticert.xml",
		},
		{
			// Written by hand: LF line ends, lower-case field names, and a
			// daticert.xml in ISO-8859-1, as its declaration says.
			file: "latin1-daticert.eml", typ: pec.Accettazione, source: pec.FromBoth,
			keys:      pec.Keys{MessageID: "abc.1@mittente.test", Identificativo: "opec.latin1@pec.provider.test"},
			identFrom: pec.FromDaticert, signature: pec.SignatureInvalid,
			check: func(t *testing.T, r *pec.Receipt) {
				if r.Daticert.Oggetto != "Perché è così" || r.TipoRicevuta != "sintetica" {
					t.Errorf("oggetto %q, tipo ricevuta %q", r.Daticert.Oggetto, r.TipoRicevuta)
				}
			},
		},
		{
			// Written by hand: a receipt with neither X-Ricevuta nor
			// daticert.xml, read from its Subject and its text.
			file: "virus-subject-only.eml", typ: pec.ErroreConsegna, source: pec.FromHeaders,
			keys:      pec.Keys{MessageID: "abc.2@mittente.test", Identificativo: "opec.virus@pec.provider.test"},
			identFrom: pec.FromBody, signature: pec.SignatureInvalid, daticertErr: "no daticert.xml",
		},
		{
			// Written by hand: a customer's mail whose Subject happens to
			// look like a receipt's.
			file: "not-pec.eml", signature: pec.SignatureInvalid,
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			r, err := pec.Parse(raw, pec.Options{Roots: roots, Now: checkAt})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if r.Type != tt.typ || r.Source != tt.source || r.Keys != tt.keys {
				t.Errorf("type %q, source %q, keys %+v; want %q, %q, %+v", r.Type, r.Source, r.Keys, tt.typ, tt.source, tt.keys)
			}
			if tt.keys.Identificativo != "" && r.Fields["identificativo"] != tt.identFrom {
				t.Errorf("identificativo from %q, want %q", r.Fields["identificativo"], tt.identFrom)
			}
			if r.Signature.Status != tt.signature {
				t.Errorf("signature = %+v, want %q", r.Signature, tt.signature)
			}
			if tt.daticertErr != "" || tt.typ == "" {
				if r.Daticert != nil || !strings.Contains(r.DaticertError, tt.daticertErr) {
					t.Errorf("daticert %+v, error %q; want none, error with %q", r.Daticert, r.DaticertError, tt.daticertErr)
				}
				return
			}
			if r.Daticert == nil {
				t.Fatalf("no daticert: %s", r.DaticertError)
			}
			if tt.check != nil {
				tt.check(t, r)
			}
		})
	}
}

// TestFixturesOpenSSL has OpenSSL, a reader other than this package's,
// verify the signatures of the generated receipts.
func TestFixturesOpenSSL(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("openssl is missing: apt-get install -y openssl")
		}
		t.Skip("openssl is missing")
	}
	for name := range generated {
		out, err := exec.Command(openssl, "smime", "-verify", "-purpose", "any", "-CAfile", filepath.Join("testdata", "provider-ca.pem"),
			"-in", filepath.Join("testdata", name), "-out", os.DevNull).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Verification successful") {
			t.Errorf("%s: openssl: %v: %s", name, err, out)
		}
	}
}
