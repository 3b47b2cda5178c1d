package pec_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/relay/pec"
	"github.com/genropy/postino/relay/pec/pectest"
)

// checkAt is when signatures are checked in these tests: fixed, so that
// nothing here depends on the day the tests run.
var checkAt = time.Date(2030, time.June, 1, 12, 0, 0, 0, time.UTC)

// sent is when the receipts built here are emitted.
var sent = time.Date(2024, time.March, 1, 16, 39, 26, 0, time.FixedZone("CET", 3600))

const original = "From: Ufficio <ufficio@pec.mittente.test>\r\n" +
	"To: uno@pec.dest.test, Due <due@pec.dest.test>\r\n" +
	"Cc: esterno@gmail.test\r\n" +
	"Subject: Fattura 2024/17\r\n" +
	"Message-ID: <20240301.1234@postino.test>\r\n" +
	"X-Genro-Mail-ID: mail-42\r\n" +
	"Date: Fri, 01 Mar 2024 16:39:20 +0100\r\n" +
	"MIME-Version: 1.0\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\n" +
	"\r\n" +
	"In allegato la fattura.\r\n"

var recipients = []pec.Recipient{
	{Address: "uno@pec.dest.test", Type: "certificato"},
	{Address: "due@pec.dest.test", Type: "certificato"},
	{Address: "esterno@gmail.test", Type: "esterno"},
}

func TestParseReceipts(t *testing.T) {
	ca := pectest.NewCA(t)
	const ident = "opec-test.ident.1@pec.provider.test"

	tests := []struct {
		name string
		opts pectest.ReceiptOptions
		// edit changes the built receipt, for what pectest cannot build.
		edit func([]byte) []byte

		typ          pec.Type
		typeFrom     pec.Source
		source       pec.Source
		identFrom    pec.Source
		mailID       string
		tipoRicevuta string
		daticertErr  string // a substring; "" wants a daticert
		check        func(t *testing.T, d *pec.Daticert)
	}{
		{
			name: "accettazione, several recipients",
			opts: pectest.ReceiptOptions{Type: pec.Accettazione, Recipients: recipients},
			typ:  pec.Accettazione, typeFrom: pec.FromHeaders, source: pec.FromBoth, identFrom: pec.FromDaticert,
			tipoRicevuta: "completa",
			check: func(t *testing.T, d *pec.Daticert) {
				if !reflect.DeepEqual(d.Destinatari, recipients) {
					t.Errorf("destinatari = %+v, want %+v", d.Destinatari, recipients)
				}
				if d.Mittente != "ufficio@pec.mittente.test" || d.Oggetto != "Fattura 2024/17" || d.Errore != "nessuno" {
					t.Errorf("intestazione = %q %q, errore %q", d.Mittente, d.Oggetto, d.Errore)
				}
				if d.GestoreEmittente != "Provider Test S.p.A." {
					t.Errorf("gestore-emittente = %q", d.GestoreEmittente)
				}
			},
		},
		{
			name: "non-accettazione",
			opts: pectest.ReceiptOptions{Type: pec.NonAccettazione, ErroreEsteso: "messaggio troppo grande"},
			typ:  pec.NonAccettazione, typeFrom: pec.FromHeaders, source: pec.FromBoth, identFrom: pec.FromDaticert,
			tipoRicevuta: "completa",
			check: func(t *testing.T, d *pec.Daticert) {
				if d.Errore != "altro" || d.ErroreEsteso != "messaggio troppo grande" {
					t.Errorf("errore = %q, errore-esteso = %q", d.Errore, d.ErroreEsteso)
				}
			},
		},
		{
			name: "presa-in-carico",
			opts: pectest.ReceiptOptions{Type: pec.PresaInCarico, Consegna: "due@pec.dest.test"},
			typ:  pec.PresaInCarico, typeFrom: pec.FromHeaders, source: pec.FromBoth, identFrom: pec.FromDaticert,
			tipoRicevuta: "completa",
			check: func(t *testing.T, d *pec.Daticert) {
				if d.Ricezione != "due@pec.dest.test" {
					t.Errorf("ricezione = %q", d.Ricezione)
				}
			},
		},
		{
			name: "avvenuta-consegna completa carries postacert.eml",
			opts: pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, Consegna: "uno@pec.dest.test"},
			typ:  pec.AvvenutaConsegna, typeFrom: pec.FromHeaders, source: pec.FromBoth, identFrom: pec.FromDaticert,
			mailID: "mail-42", tipoRicevuta: "completa",
			check: func(t *testing.T, d *pec.Daticert) {
				if d.Consegna != "uno@pec.dest.test" || d.Ricevuta != "completa" {
					t.Errorf("consegna = %q, ricevuta = %q", d.Consegna, d.Ricevuta)
				}
			},
		},
		{
			name: "avvenuta-consegna breve, daticert in quoted-printable",
			opts: pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, TipoRicevuta: "breve", DaticertEncoding: "quoted-printable"},
			typ:  pec.AvvenutaConsegna, typeFrom: pec.FromHeaders, source: pec.FromBoth, identFrom: pec.FromDaticert,
			tipoRicevuta: "breve",
			check: func(t *testing.T, d *pec.Daticert) {
				if d.Ricevuta != "breve" || d.Consegna != "uno@pec.dest.test" {
					t.Errorf("ricevuta = %q, consegna = %q", d.Ricevuta, d.Consegna)
				}
			},
		},
		{
			name: "errore-consegna no-dest, daticert in quoted-printable",
			opts: pectest.ReceiptOptions{Type: pec.ErroreConsegna, Errore: "no-dest", Consegna: "due@pec.dest.test",
				ErroreEsteso: "5.1.1 - Utente non riconosciuto", DaticertEncoding: "quoted-printable"},
			typ: pec.ErroreConsegna, typeFrom: pec.FromHeaders, source: pec.FromBoth, identFrom: pec.FromDaticert,
			tipoRicevuta: "completa",
			check: func(t *testing.T, d *pec.Daticert) {
				if d.Errore != "no-dest" || d.Consegna != "due@pec.dest.test" || d.ErroreEsteso != "5.1.1 - Utente non riconosciuto" {
					t.Errorf("errore = %q, consegna = %q, errore-esteso = %q", d.Errore, d.Consegna, d.ErroreEsteso)
				}
			},
		},
		{
			name: "preavviso-errore-consegna",
			opts: pectest.ReceiptOptions{Type: pec.PreavvisoErroreConsegna},
			typ:  pec.PreavvisoErroreConsegna, typeFrom: pec.FromHeaders, source: pec.FromBoth, identFrom: pec.FromDaticert,
			tipoRicevuta: "completa",
		},
		{
			name: "rilevazione-virus",
			opts: pectest.ReceiptOptions{Type: pec.RilevazioneVirus},
			typ:  pec.RilevazioneVirus, typeFrom: pec.FromHeaders, source: pec.FromBoth, identFrom: pec.FromDaticert,
			tipoRicevuta: "completa",
			check: func(t *testing.T, d *pec.Daticert) {
				if d.Errore != "virus" {
					t.Errorf("errore = %q", d.Errore)
				}
			},
		},
		{
			name: "posta-certificata envelope",
			opts: pectest.ReceiptOptions{Type: pec.PostaCertificata, TipoRicevuta: "sintetica"},
			typ:  pec.PostaCertificata, typeFrom: pec.FromHeaders, source: pec.FromBoth, identFrom: pec.FromDaticert,
			mailID: "mail-42", tipoRicevuta: "sintetica",
		},
		{
			name: "anomaly envelope has no daticert: identificativo from the text",
			opts: pectest.ReceiptOptions{Type: pec.ErroreTrasporto},
			typ:  pec.ErroreTrasporto, typeFrom: pec.FromHeaders, source: pec.FromHeaders, identFrom: pec.FromBody,
			mailID: "mail-42", tipoRicevuta: "completa", daticertErr: "no daticert.xml",
		},
		{
			name: "no X-Ricevuta: the Subject says accettazione",
			opts: pectest.ReceiptOptions{Type: pec.Accettazione, OmitTypeHeader: true},
			typ:  pec.Accettazione, typeFrom: pec.FromHeaders, source: pec.FromBoth, identFrom: pec.FromDaticert,
			tipoRicevuta: "completa",
		},
		{
			name: "no X-Ricevuta, no daticert: the Subject and the text",
			opts: pectest.ReceiptOptions{Type: pec.RilevazioneVirus, OmitTypeHeader: true, DaticertEncoding: "none"},
			typ:  pec.RilevazioneVirus, typeFrom: pec.FromHeaders, source: pec.FromHeaders, identFrom: pec.FromBody,
			tipoRicevuta: "completa", daticertErr: "no daticert.xml",
		},
		{
			name: "no X-Ricevuta, a Subject of no type: daticert says it",
			opts: pectest.ReceiptOptions{Type: pec.Accettazione, OmitTypeHeader: true, Unsigned: true},
			edit: func(raw []byte) []byte {
				return bytes.Replace(raw, []byte("Subject: ACCETTAZIONE: "), []byte("Subject: Ricevuta: "), 1)
			},
			typ: pec.Accettazione, typeFrom: pec.FromDaticert, source: pec.FromDaticert, identFrom: pec.FromDaticert,
			tipoRicevuta: "completa",
		},
		{
			// The rules give the final 24-hour failure the same Subject as
			// the 12-hour warning.
			name: "timeout Subject, daticert says errore-consegna",
			opts: pectest.ReceiptOptions{Type: pec.ErroreConsegna, OmitTypeHeader: true, Unsigned: true},
			edit: func(raw []byte) []byte {
				return bytes.Replace(raw, []byte("Subject: AVVISO DI MANCATA CONSEGNA: "),
					[]byte("Subject: AVVISO DI MANCATA CONSEGNA PER SUP. TEMPO MASSIMO: "), 1)
			},
			typ: pec.ErroreConsegna, typeFrom: pec.FromDaticert, source: pec.FromDaticert, identFrom: pec.FromDaticert,
			tipoRicevuta: "completa",
		},
		{
			name: "broken daticert: the headers still count",
			opts: pectest.ReceiptOptions{Type: pec.ErroreConsegna, DaticertEncoding: "broken"},
			typ:  pec.ErroreConsegna, typeFrom: pec.FromHeaders, source: pec.FromHeaders, identFrom: pec.FromBody,
			tipoRicevuta: "completa", daticertErr: "XML syntax error",
		},
		{
			name: "missing daticert",
			opts: pectest.ReceiptOptions{Type: pec.Accettazione, DaticertEncoding: "none"},
			typ:  pec.Accettazione, typeFrom: pec.FromHeaders, source: pec.FromHeaders, identFrom: pec.FromBody,
			tipoRicevuta: "completa", daticertErr: "no daticert.xml",
		},
		{
			name: "opaque signature",
			opts: pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, Opaque: true},
			typ:  pec.AvvenutaConsegna, typeFrom: pec.FromHeaders, source: pec.FromBoth, identFrom: pec.FromDaticert,
			mailID: "mail-42", tipoRicevuta: "completa",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			o.Original, o.Identificativo, o.Date = []byte(original), ident, sent
			raw := ca.Receipt(t, o)
			if tt.edit != nil {
				raw = tt.edit(raw)
			}
			r, err := pec.Parse(raw, pec.Options{Roots: ca.Pool(), Now: checkAt})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}

			if r.Type != tt.typ || r.Fields["type"] != tt.typeFrom {
				t.Errorf("type = %q from %q, want %q from %q", r.Type, r.Fields["type"], tt.typ, tt.typeFrom)
			}
			if r.Source != tt.source {
				t.Errorf("source = %q, want %q", r.Source, tt.source)
			}
			want := pec.Keys{MessageID: "20240301.1234@postino.test", Identificativo: ident, MailID: tt.mailID}
			if r.Keys != want {
				t.Errorf("keys = %+v, want %+v", r.Keys, want)
			}
			// The signed daticert.xml's msgid wins over the header.
			msgFrom := pec.FromHeaders
			if r.Daticert != nil && r.Daticert.MsgID != "" {
				msgFrom = pec.FromDaticert
			}
			if r.Fields["message_id"] != msgFrom || r.Fields["identificativo"] != tt.identFrom || r.MessageIDConflict != "" {
				t.Errorf("message_id from %q, identificativo from %q, conflict %q; want %q, %q, none",
					r.Fields["message_id"], r.Fields["identificativo"], r.MessageIDConflict, msgFrom, tt.identFrom)
			}
			if r.TipoRicevuta != tt.tipoRicevuta {
				t.Errorf("tipo ricevuta = %q, want %q", r.TipoRicevuta, tt.tipoRicevuta)
			}
			if !r.Date.Equal(sent) {
				t.Errorf("date = %v, want %v", r.Date, sent)
			}
			if !strings.HasSuffix(r.Subject, "Fattura 2024/17") {
				t.Errorf("subject = %q", r.Subject)
			}

			wantSig := pec.SignatureValid
			if o.Unsigned {
				wantSig = pec.SignatureInvalid
			}
			if r.Signature.Status != wantSig {
				t.Errorf("signature = %+v, want %q", r.Signature, wantSig)
			}

			if tt.daticertErr != "" {
				if r.Daticert != nil || !strings.Contains(r.DaticertError, tt.daticertErr) {
					t.Errorf("daticert = %+v, error %q; want none, error with %q", r.Daticert, r.DaticertError, tt.daticertErr)
				}
				return
			}
			d := r.Daticert
			if d == nil {
				t.Fatalf("no daticert: %s", r.DaticertError)
			}
			if d.Tipo != string(o.Type) || d.MsgID != want.MessageID || d.Identificativo != ident {
				t.Errorf("daticert tipo %q, msgid %q, identificativo %q", d.Tipo, d.MsgID, d.Identificativo)
			}
			if _, off := d.Data.Zone(); !d.Data.Equal(sent) || off != 3600 {
				t.Errorf("daticert data = %v, want %v with offset +0100", d.Data, sent)
			}
			for _, f := range []string{"tipo", "mittente", "destinatari", "data", "msgid"} {
				if r.Fields[f] != pec.FromDaticert {
					t.Errorf("field %s from %q, want daticert", f, r.Fields[f])
				}
			}
			if tt.check != nil {
				tt.check(t, d)
			}
		})
	}
}

// TestParseDefaultRecipients checks that pectest's defaults make a receipt
// that reads back: recipients from the original's To and Cc.
func TestParseDefaultRecipients(t *testing.T) {
	ca := pectest.NewCA(t)
	raw := ca.Receipt(t, pectest.ReceiptOptions{Type: pec.Accettazione, Original: []byte(original), Date: sent})
	r, err := pec.Parse(raw, pec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Daticert == nil || len(r.Daticert.Destinatari) != 3 {
		t.Fatalf("daticert = %+v (%s)", r.Daticert, r.DaticertError)
	}
	// Every receipt of a message shares its identificativo.
	again, err := pec.Parse(ca.Receipt(t, pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, Original: []byte(original)}), pec.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Keys.Identificativo == "" || r.Keys.Identificativo != again.Keys.Identificativo {
		t.Errorf("identificativo %q, then %q", r.Keys.Identificativo, again.Keys.Identificativo)
	}
}

func TestParseNotPEC(t *testing.T) {
	for _, raw := range []string{
		"From: cliente@example.test\r\nTo: ufficio@example.test\r\nSubject: CONSEGNA: ordine 12\r\n\r\nCiao.\r\n",
		"Subject: hello\r\n",
		"From: a@b.test\nSubject: ACCETTAZIONE: x\n\nIdentificativo del messaggio: nope@x\n",
	} {
		r, err := pec.Parse([]byte(raw), pec.Options{})
		if err != nil {
			t.Fatalf("Parse(%q): %v", raw, err)
		}
		if r.Type != "" || r.Source != "" || r.DaticertError != "" {
			t.Errorf("Parse(%q) = type %q, source %q, daticert error %q; want not PEC", raw, r.Type, r.Source, r.DaticertError)
		}
		if r.Signature.Status != pec.SignatureNotChecked {
			t.Errorf("signature = %+v", r.Signature)
		}
	}
}

// TestParseMessageIDConflict checks that the Message-ID daticert.xml names,
// inside the signature, wins over X-Riferimento-Message-ID, outside it, and
// that their disagreement is told.
func TestParseMessageIDConflict(t *testing.T) {
	ca := pectest.NewCA(t)
	raw := ca.Receipt(t, pectest.ReceiptOptions{Type: pec.Accettazione, Original: []byte(original), Date: sent})
	tests := []struct {
		name, header, wantConflict string
	}{
		{"agree", "<20240301.1234@postino.test>", ""},
		{"disagree", "<forged.1@elsewhere.test>", "forged.1@elsewhere.test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			edited := bytes.Replace(raw, []byte("X-Riferimento-Message-ID: <20240301.1234@postino.test>"),
				[]byte("X-Riferimento-Message-ID: "+tt.header), 1)
			r, err := pec.Parse(edited, pec.Options{Roots: ca.Pool(), Now: checkAt})
			if err != nil {
				t.Fatal(err)
			}
			if r.Keys.MessageID != "20240301.1234@postino.test" || r.Fields["message_id"] != pec.FromDaticert || r.MessageIDConflict != tt.wantConflict {
				t.Errorf("message id %q from %q, conflict %q; want daticert's, conflict %q", r.Keys.MessageID, r.Fields["message_id"], r.MessageIDConflict, tt.wantConflict)
			}
			// The header is outside the signature: changing it breaks nothing.
			if r.Signature.Status != pec.SignatureValid {
				t.Errorf("signature %+v", r.Signature)
			}
		})
	}
}

// TestParseVerificaSicurezza checks that X-VerificaSicurezza is read where a
// provider writes it.
func TestParseVerificaSicurezza(t *testing.T) {
	ca := pectest.NewCA(t)
	raw := ca.Receipt(t, pectest.ReceiptOptions{Type: pec.PostaCertificata, Original: []byte(original), Date: sent})
	for _, tt := range []struct{ name, header, want string }{
		{"absent", "", ""},
		{"errore", "X-VerificaSicurezza: errore\r\n", "errore"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := pec.Parse(append([]byte(tt.header), raw...), pec.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if r.VerificaSicurezza != tt.want {
				t.Errorf("VerificaSicurezza = %q, want %q", r.VerificaSicurezza, tt.want)
			}
		})
	}
}
