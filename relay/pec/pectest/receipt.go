package pectest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/mail"
	"github.com/emersion/go-message/textproto"
	"github.com/smallstep/pkcs7"

	"github.com/genropy/postino/relay/pec"
)

// ReceiptOptions say what receipt to build. Only Type is required.
type ReceiptOptions struct {
	// Type is the receipt's X-Ricevuta, or X-Trasporto for envelopes.
	Type pec.Type
	// Original is the message as the provider took it in: its Message-ID,
	// Subject, From, To and Cc fill the receipt, and it is attached as
	// postacert.eml to envelopes and to complete delivery receipts. Nil
	// stands for a short message from mittente@pec.sender.test.
	Original []byte
	// Recipients are daticert's destinatari; nil takes To and Cc of
	// Original, all certificato.
	Recipients []pec.Recipient
	// Consegna is the recipient a delivery, a failed delivery or a
	// presa in carico is about; empty is the first recipient.
	Consegna string
	// Errore is postacert's errore attribute; empty is nessuno, altro
	// for failures and virus for rilevazione-virus.
	Errore       string
	ErroreEsteso string
	// Identificativo is the provider's id of the message; empty derives
	// one from Original's Message-ID, so that every receipt of a message
	// shares it, as with real providers.
	Identificativo string
	// TipoRicevuta is X-TipoRicevuta and daticert's ricevuta: completa
	// (the default), breve or sintetica.
	TipoRicevuta string
	// DaticertEncoding is the transfer encoding of daticert.xml: base64
	// (the default) or quoted-printable; none leaves it out and broken
	// writes malformed XML. Anomaly envelopes (pec.ErroreTrasporto) never
	// carry one: the rules give them none.
	DaticertEncoding string
	// Unsigned leaves the S/MIME signature out.
	Unsigned bool
	// Tamper changes one byte of the signed content after signing.
	Tamper bool
	// Opaque signs with application/pkcs7-mime, the receipt inside the
	// signature, instead of multipart/signed. PEC providers do not, but
	// the format is S/MIME's other way to sign.
	Opaque bool
	// OmitTypeHeader leaves X-Ricevuta (or X-Trasporto) out, so that a
	// reader has to go by the Subject.
	OmitTypeHeader bool
	// Date is when the provider emits the receipt; zero is now.
	Date time.Time
	// NoSigningTime signs without the signing-time attribute (nor any
	// other), as some providers do: the signature then says nothing of
	// when it was made.
	NoSigningTime bool
}

// gestore is the provider's name in daticert.xml.
const gestore = "Provider Test S.p.A."

const defaultOriginal = "From: mittente@pec.sender.test\r\n" +
	"To: destinatario@pec.dest.test\r\n" +
	"Subject: Messaggio di prova\r\n" +
	"Message-ID: <original.1@sender.test>\r\n" +
	"Date: Mon, 01 Jan 2024 10:00:00 +0100\r\n" +
	"MIME-Version: 1.0\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\n" +
	"\r\n" +
	"Testo del messaggio.\r\n"

// Receipt builds the receipt (or envelope) o describes, as raw CRLF bytes:
// the provider's header fields, then, inside multipart/signed with a
// detached PKCS #7 signature by ca.Signer, a text part, daticert.xml and,
// when the rules want it, the original as postacert.eml.
func (ca *CA) Receipt(t testing.TB, o ReceiptOptions) []byte {
	t.Helper()
	raw, err := ca.receipt(o)
	if err != nil {
		t.Fatalf("pectest: %v", err)
	}
	return raw
}

func (ca *CA) receipt(o ReceiptOptions) ([]byte, error) {
	if subjectPrefix(o.Type, "") == "" {
		return nil, fmt.Errorf("unknown receipt type %q", o.Type)
	}
	orig, err := readOriginal(o.Original)
	if err != nil {
		return nil, err
	}
	b := newBuild(o, orig)

	var out bytes.Buffer
	if o.Unsigned {
		h := b.header()
		h.SetContentType("multipart/mixed", nil)
		if err := b.writeContent(&out, h.Header); err != nil {
			return nil, err
		}
		return out.Bytes(), nil
	}

	var content bytes.Buffer
	var ch message.Header
	ch.SetContentType("multipart/mixed", nil)
	if err := b.writeContent(&content, ch); err != nil {
		return nil, err
	}
	der, err := ca.sign(content.Bytes(), !o.Opaque, o.NoSigningTime)
	if err != nil {
		return nil, err
	}
	if o.Opaque {
		return b.opaque(der)
	}

	boundary := "----=_pectest_" + shortHash(b.ident, "signed")
	h := b.header()
	h.SetContentType("multipart/signed", map[string]string{
		"protocol": "application/pkcs7-signature",
		"micalg":   "sha-256",
		"boundary": boundary,
	})
	var sh message.Header
	sh.SetContentType("application/pkcs7-signature", map[string]string{"name": "smime.p7s"})
	sh.Set("Content-Transfer-Encoding", "base64")
	sh.SetContentDisposition("attachment", map[string]string{"filename": "smime.p7s"})

	// The framing is written by hand, not through a MIME writer, because
	// the first part must be byte for byte what was signed.
	if err := textproto.WriteHeader(&out, h.Header.Header); err != nil {
		return nil, err
	}
	out.WriteString("This is an S/MIME signed message\r\n\r\n--" + boundary + "\r\n")
	start := out.Len()
	out.Write(content.Bytes())
	end := out.Len()
	out.WriteString("\r\n--" + boundary + "\r\n")
	if err := textproto.WriteHeader(&out, sh.Header); err != nil {
		return nil, err
	}
	writeBase64(&out, der)
	out.WriteString("\r\n--" + boundary + "--\r\n")

	raw := out.Bytes()
	if o.Tamper {
		if err := tamper(raw[start:end]); err != nil {
			return nil, err
		}
	}
	return raw, nil
}

// opaque writes a receipt whose content is inside its signature.
func (b *build) opaque(der []byte) ([]byte, error) {
	if b.o.Tamper {
		// The content lies in the DER as it is, an OCTET STRING.
		if err := tamper(der); err != nil {
			return nil, err
		}
	}
	h := b.header()
	h.SetContentType("application/pkcs7-mime", map[string]string{"smime-type": "signed-data", "name": "smime.p7m"})
	h.SetContentDisposition("attachment", map[string]string{"filename": "smime.p7m"})
	h.Set("Content-Transfer-Encoding", "base64")
	var out bytes.Buffer
	if err := textproto.WriteHeader(&out, h.Header.Header); err != nil {
		return nil, err
	}
	writeBase64(&out, der)
	return out.Bytes(), nil
}

// tamper changes one letter of the provider's text, as someone amending a
// receipt after the fact would.
func tamper(signed []byte) error {
	i := bytes.Index(signed, []byte("Il giorno"))
	if i < 0 {
		return fmt.Errorf("tamper: no text to change")
	}
	signed[i+3] = 'G'
	return nil
}

// sign makes the signature a provider puts in smime.p7s (detached) or
// smime.p7m.
func (ca *CA) sign(content []byte, detached, noAttributes bool) ([]byte, error) {
	sd, err := pkcs7.NewSignedData(content)
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	sd.SetDigestAlgorithm(pkcs7.OIDDigestAlgorithmSHA256)
	add := sd.AddSigner
	if noAttributes {
		add = sd.SignWithoutAttr
	}
	if err := add(ca.Signer, ca.signerKey, pkcs7.SignerInfoConfig{}); err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	if detached {
		sd.Detach()
	}
	der, err := sd.Finish()
	if err != nil {
		return nil, fmt.Errorf("signing: %w", err)
	}
	return der, nil
}

// original is what a receipt repeats of the message it is about.
type original struct {
	raw        []byte
	messageID  string
	subject    string
	from       string
	replyTo    string
	recipients []pec.Recipient
}

func readOriginal(raw []byte) (*original, error) {
	if raw == nil {
		raw = []byte(defaultOriginal)
	}
	raw = crlf(raw)
	e, err := message.Read(bytes.NewReader(raw))
	if err != nil && !message.IsUnknownCharset(err) && !message.IsUnknownEncoding(err) {
		return nil, fmt.Errorf("original: %w", err)
	}
	h := mail.Header{Header: e.Header}
	o := &original{raw: raw}
	o.messageID, _ = h.MessageID()
	o.subject, _ = h.Subject()
	if from, err := h.AddressList("From"); err == nil && len(from) > 0 {
		o.from = from[0].Address
	}
	o.replyTo = o.from
	if rt, err := h.AddressList("Reply-To"); err == nil && len(rt) > 0 {
		o.replyTo = rt[0].Address
	}
	for _, k := range []string{"To", "Cc"} {
		list, _ := h.AddressList(k)
		for _, a := range list {
			o.recipients = append(o.recipients, pec.Recipient{Address: a.Address, Type: "certificato"})
		}
	}
	return o, nil
}

// build holds a receipt's options with every default filled in.
type build struct {
	o          ReceiptOptions
	orig       *original
	date       time.Time
	ident      string
	tipo       string
	errore     string
	consegna   string
	recipients []pec.Recipient
}

func newBuild(o ReceiptOptions, orig *original) *build {
	b := &build{o: o, orig: orig, date: o.Date, ident: o.Identificativo, tipo: o.TipoRicevuta,
		errore: o.Errore, consegna: o.Consegna, recipients: o.Recipients}
	if b.date.IsZero() {
		b.date = time.Now()
	}
	b.date = b.date.Truncate(time.Second)
	if b.ident == "" {
		b.ident = "opec-test." + shortHash(orig.messageID) + "@pec.provider.test"
	}
	if b.tipo == "" {
		b.tipo = "completa"
	}
	if b.recipients == nil {
		b.recipients = orig.recipients
	}
	if b.consegna == "" && len(b.recipients) > 0 {
		b.consegna = b.recipients[0].Address
	}
	if b.errore == "" {
		switch o.Type {
		case pec.NonAccettazione, pec.ErroreConsegna, pec.PreavvisoErroreConsegna:
			b.errore = "altro"
		case pec.RilevazioneVirus:
			b.errore = "virus"
		default:
			b.errore = "nessuno"
		}
	}
	return b
}

func (b *build) envelope() bool {
	return b.o.Type == pec.PostaCertificata || b.o.Type == pec.ErroreTrasporto
}

// header returns the provider's header fields of the receipt.
func (b *build) header() mail.Header {
	var h mail.Header
	from := &mail.Address{Address: ProviderAddress}
	to := []*mail.Address{{Address: b.orig.from}}
	msgID := "opec-test." + shortHash(string(b.o.Type), b.ident, b.consegna, b.date.String()) + "@pec.provider.test"
	if b.envelope() {
		// An envelope goes to the recipients on behalf of the sender,
		// under the message's identificativo.
		from.Name = "Per conto di: " + b.orig.from
		to = to[:0]
		for _, r := range b.recipients {
			to = append(to, &mail.Address{Address: r.Address})
		}
		msgID = b.ident
	}

	// Each field goes on top of the previous ones: they are set last to
	// first. PEC fields keep the rules' spelling (X-TipoRicevuta, not
	// X-Tiporicevuta), which readers must not depend on but may as well
	// see.
	setRaw(&h, "Message-ID", "<"+msgID+">")
	setRaw(&h, "X-TipoRicevuta", b.tipo)
	if !b.o.OmitTypeHeader {
		if b.envelope() {
			setRaw(&h, "X-Trasporto", string(b.o.Type))
		} else {
			setRaw(&h, "X-Ricevuta", string(b.o.Type))
		}
	}
	h.SetAddressList("From", []*mail.Address{from})
	if b.envelope() {
		h.SetAddressList("Reply-To", []*mail.Address{{Address: b.orig.replyTo}})
	}
	h.SetAddressList("To", to)
	h.SetDate(b.date)
	if b.orig.messageID != "" {
		setRaw(&h, "X-Riferimento-Message-ID", "<"+b.orig.messageID+">")
	}
	h.SetSubject(subjectPrefix(b.o.Type, b.errore) + b.orig.subject)
	return h
}

// setRaw sets a header field written exactly as key and value say.
func setRaw(h *mail.Header, key, value string) {
	h.Del(key)
	h.AddRaw([]byte(key + ": " + value + "\r\n"))
}

// writeContent writes the multipart/mixed entity a provider signs: under
// header h, the text part, daticert.xml and postacert.eml.
func (b *build) writeContent(w io.Writer, h message.Header) error {
	mw, err := message.CreateWriter(w, h)
	if err != nil {
		return err
	}

	var th message.Header
	th.SetContentType("text/plain", map[string]string{"charset": "utf-8"})
	th.SetContentDisposition("inline", nil)
	th.Set("Content-Transfer-Encoding", "quoted-printable")
	if err := writePart(mw, th, []byte(b.text())); err != nil {
		return err
	}

	enc := b.o.DaticertEncoding
	if enc == "" || enc == "broken" {
		enc = "base64"
	}
	if b.o.DaticertEncoding != "none" && b.o.Type != pec.ErroreTrasporto {
		x, err := b.daticert()
		if err != nil {
			return err
		}
		if b.o.DaticertEncoding == "broken" {
			// Cut in the middle of an element: no XML parser takes it.
			x = x[:len(x)/2]
		}
		var dh message.Header
		dh.SetContentType("application/xml", map[string]string{"name": "daticert.xml"})
		dh.SetContentDisposition("inline", map[string]string{"filename": "daticert.xml"})
		dh.Set("Content-Transfer-Encoding", enc)
		if err := writePart(mw, dh, x); err != nil {
			return err
		}
	}

	if b.envelope() || (b.o.Type == pec.AvvenutaConsegna && b.tipo == "completa") {
		var ph message.Header
		ph.SetContentType("message/rfc822", map[string]string{"name": "postacert.eml"})
		ph.SetContentDisposition("inline", map[string]string{"filename": "postacert.eml"})
		cte := "7bit"
		for _, c := range b.orig.raw {
			if c >= 0x80 {
				cte = "8bit"
				break
			}
		}
		ph.Set("Content-Transfer-Encoding", cte)
		if err := writePart(mw, ph, b.orig.raw); err != nil {
			return err
		}
	}
	return mw.Close()
}

func writePart(mw *message.Writer, h message.Header, body []byte) error {
	pw, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	if _, err := pw.Write(body); err != nil {
		return err
	}
	return pw.Close()
}

// text is the provider's human-readable account of the receipt.
func (b *build) text() string {
	var s strings.Builder
	fmt.Fprintf(&s, "%s\r\n\r\n", title(b.o.Type))
	fmt.Fprintf(&s, "Il giorno %s alle ore %s (%s) il messaggio\r\n",
		b.date.Format("02/01/2006"), b.date.Format("15:04:05"), b.date.Format("-0700"))
	fmt.Fprintf(&s, "%q inviato da %q\r\ned indirizzato a:\r\n", b.orig.subject, b.orig.from)
	for _, r := range b.recipients {
		kind := "posta certificata"
		if r.Type == "esterno" {
			kind = "posta ordinaria"
		}
		fmt.Fprintf(&s, "%s (%q)\r\n", r.Address, kind)
	}
	s.WriteString(b.outcome() + "\r\n")
	fmt.Fprintf(&s, "Identificativo messaggio: %s\r\n", b.ident)
	return s.String()
}

func title(t pec.Type) string {
	switch t {
	case pec.Accettazione:
		return "Ricevuta di accettazione"
	case pec.NonAccettazione:
		return "Avviso di non accettazione"
	case pec.PresaInCarico:
		return "Ricevuta di presa in carico"
	case pec.AvvenutaConsegna:
		return "Ricevuta di avvenuta consegna"
	case pec.ErroreConsegna:
		return "Avviso di mancata consegna"
	case pec.PreavvisoErroreConsegna:
		return "Avviso di mancata consegna per superamento del tempo massimo"
	case pec.RilevazioneVirus:
		return "Problema di sicurezza"
	case pec.PostaCertificata:
		return "Messaggio di posta certificata"
	}
	return "Anomalia nel messaggio"
}

func (b *build) outcome() string {
	switch b.o.Type {
	case pec.Accettazione:
		return "è stato accettato dal sistema ed inoltrato."
	case pec.NonAccettazione:
		return "non è stato accettato: " + b.o.ErroreEsteso
	case pec.PresaInCarico:
		return "è stato preso in carico per " + b.consegna + "."
	case pec.AvvenutaConsegna:
		return "è stato consegnato nella casella di " + b.consegna + "."
	case pec.ErroreConsegna:
		return "non è stato consegnato a " + b.consegna + ": " + b.o.ErroreEsteso
	case pec.PreavvisoErroreConsegna:
		return "non è ancora stato consegnato a " + b.consegna + "."
	case pec.RilevazioneVirus:
		return "contiene un virus e non è stato consegnato."
	case pec.PostaCertificata:
		return "Il messaggio originale è incluso in allegato."
	}
	return "non è un messaggio di posta certificata; è incluso in allegato."
}

// subjectPrefix is the Subject prefix the rules give each type.
func subjectPrefix(t pec.Type, errore string) string {
	switch t {
	case pec.Accettazione:
		return "ACCETTAZIONE: "
	case pec.NonAccettazione:
		if errore == "virus" {
			return "AVVISO DI NON ACCETTAZIONE PER VIRUS: "
		}
		return "AVVISO DI NON ACCETTAZIONE: "
	case pec.PresaInCarico:
		return "PRESA IN CARICO: "
	case pec.AvvenutaConsegna:
		return "CONSEGNA: "
	case pec.ErroreConsegna:
		if errore == "virus" {
			return "AVVISO DI MANCATA CONSEGNA PER VIRUS: "
		}
		return "AVVISO DI MANCATA CONSEGNA: "
	case pec.PreavvisoErroreConsegna:
		return "AVVISO DI MANCATA CONSEGNA PER SUP. TEMPO MASSIMO: "
	case pec.RilevazioneVirus:
		return "PROBLEMA DI SICUREZZA: "
	case pec.PostaCertificata:
		return "POSTA CERTIFICATA: "
	case pec.ErroreTrasporto:
		return "ANOMALIA MESSAGGIO: "
	}
	return ""
}

// xmlPostacert is daticert.xml as the DTD of the rules lays it out.
type xmlPostacert struct {
	XMLName      xml.Name `xml:"postacert"`
	Tipo         string   `xml:"tipo,attr"`
	Errore       string   `xml:"errore,attr"`
	Intestazione struct {
		Mittente    string `xml:"mittente"`
		Destinatari []struct {
			Tipo    string `xml:"tipo,attr"`
			Address string `xml:",chardata"`
		} `xml:"destinatari"`
		Risposte string `xml:"risposte"`
		Oggetto  string `xml:"oggetto"`
	} `xml:"intestazione"`
	Dati struct {
		GestoreEmittente string `xml:"gestore-emittente"`
		Data             struct {
			Zona   string `xml:"zona,attr"`
			Giorno string `xml:"giorno"`
			Ora    string `xml:"ora"`
		} `xml:"data"`
		Identificativo string `xml:"identificativo"`
		MsgID          string `xml:"msgid,omitempty"`
		Ricevuta       *struct {
			Tipo string `xml:"tipo,attr"`
		} `xml:"ricevuta"`
		Consegna     string `xml:"consegna,omitempty"`
		Ricezione    string `xml:"ricezione,omitempty"`
		ErroreEsteso string `xml:"errore-esteso,omitempty"`
	} `xml:"dati"`
}

func (b *build) daticert() ([]byte, error) {
	var x xmlPostacert
	x.Tipo, x.Errore = string(b.o.Type), b.errore
	x.Intestazione.Mittente = b.orig.from
	for _, r := range b.recipients {
		x.Intestazione.Destinatari = append(x.Intestazione.Destinatari, struct {
			Tipo    string `xml:"tipo,attr"`
			Address string `xml:",chardata"`
		}{r.Type, r.Address})
	}
	x.Intestazione.Risposte = b.orig.replyTo
	x.Intestazione.Oggetto = b.orig.subject
	x.Dati.GestoreEmittente = gestore
	x.Dati.Data.Zona = b.date.Format("-0700")
	x.Dati.Data.Giorno = b.date.Format("02/01/2006")
	x.Dati.Data.Ora = b.date.Format("15:04:05")
	x.Dati.Identificativo = b.ident
	if b.orig.messageID != "" {
		x.Dati.MsgID = "<" + b.orig.messageID + ">"
	}
	switch b.o.Type {
	case pec.AvvenutaConsegna, pec.PostaCertificata:
		x.Dati.Ricevuta = &struct {
			Tipo string `xml:"tipo,attr"`
		}{b.tipo}
	}
	switch b.o.Type {
	case pec.AvvenutaConsegna, pec.ErroreConsegna, pec.PreavvisoErroreConsegna:
		x.Dati.Consegna = b.consegna
	case pec.PresaInCarico:
		x.Dati.Ricezione = b.consegna
	}
	x.Dati.ErroreEsteso = b.o.ErroreEsteso

	out, err := xml.MarshalIndent(x, "", "    ")
	if err != nil {
		return nil, fmt.Errorf("daticert.xml: %w", err)
	}
	return append([]byte(xml.Header), append(out, '\n')...), nil
}

// writeBase64 writes b in base64 lines of 64 characters, as OpenSSL does.
func writeBase64(w *bytes.Buffer, b []byte) {
	s := base64.StdEncoding.EncodeToString(b)
	for len(s) > 64 {
		w.WriteString(s[:64] + "\r\n")
		s = s[64:]
	}
	w.WriteString(s + "\r\n")
}

// crlf turns bare LF line ends into CRLF, the form mail travels in.
func crlf(b []byte) []byte {
	out := make([]byte, 0, len(b)+bytes.Count(b, []byte{'\n'}))
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			out = append(out, '\r')
		}
		out = append(out, c)
	}
	return out
}

// shortHash derives a stable short id from its inputs.
func shortHash(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:8])
}
