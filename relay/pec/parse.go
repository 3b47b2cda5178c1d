package pec

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/emersion/go-message"
	_ "github.com/emersion/go-message/charset" // receipts' text parts are ISO-8859-1 as often as UTF-8
	"github.com/emersion/go-message/mail"
)

// Parse reads one message of a PEC mailbox: a provider's receipt, a
// transport envelope, or any other message, which comes back with an empty
// Type. It returns an error only when raw is not a message at all: a broken
// daticert.xml or a bad signature is reported in the Receipt, which still
// says what its headers say.
//
// A receipt forwarded inside another message, or wrapped by a mailing list,
// is read inside it, its signature checked there; Receipt.WrappedIn says
// what it came inside.
func Parse(raw []byte, opts Options) (*Receipt, error) {
	e, err := readMessage(raw)
	if err != nil {
		return nil, err
	}
	h := mail.Header{Header: e.Header}
	var wrapper *Wrapper
	if !isSigned(e.Header) {
		switch how, part := unwrap(raw, looksLikeProvider(h)); how {
		case Forwarded:
			// unwrap found a signed PEC message: it is the receipt, and
			// being signed it is read as it is, not unwrapped again.
			if r, err := Parse(part, opts); err == nil {
				w := wrapperOf(Forwarded, h)
				r.WrappedIn = &w
				return r, nil
			}
		case Wrapped:
			// The list kept the receipt's header fields and put its
			// signed body in a part: the signature is checked there,
			// the fields are read from what it covers.
			if pe, err := readMessage(part); err == nil {
				raw, e = part, pe
				w := wrapperOf(Wrapped, h)
				wrapper = &w
			}
		}
	}
	r := read(raw, h, e, opts)
	r.WrappedIn = wrapper
	return r, nil
}

// readMessage reads raw as a message, whose header must not be empty.
func readMessage(raw []byte) (*message.Entity, error) {
	e, err := message.Read(bytes.NewReader(raw))
	if err != nil && !softError(err) {
		return nil, fmt.Errorf("pec: not a message: %w", err)
	}
	if e.Header.Len() == 0 {
		return nil, errors.New("pec: not a message: no header fields")
	}
	return e, nil
}

// wrapperOf describes the message of header h a receipt came inside.
func wrapperOf(how string, h mail.Header) Wrapper {
	w := Wrapper{How: how, ListID: strings.TrimSpace(h.Get("List-Id"))}
	if how != Forwarded {
		// A list's copy kept the receipt's From and Subject.
		return w
	}
	w.Subject, _ = h.Subject()
	if from, err := h.AddressList("From"); err == nil && len(from) > 0 {
		w.From = from[0].Address
	}
	return w
}

// read reads the receipt whose header fields are h and whose body is e, as
// raw holds it with e's header.
func read(raw []byte, h mail.Header, e *message.Entity, opts Options) *Receipt {
	r := &Receipt{Fields: make(map[string]Source)}
	// A malformed Subject or Date is not a reason to give up on a receipt:
	// the raw Subject and a zero Date say as much as there is to say.
	r.Subject, _ = h.Subject()
	r.Date, _ = h.Date()
	r.MessageID = messageID(h)

	var opaque []byte
	signedHeader := e.Header
	r.Signature, opaque = checkSignature(raw, signedHeader, judgedAt{r.Date, "date"}, opts)
	if opaque != nil {
		// An opaque signature (application/pkcs7-mime) carries the
		// receipt inside it: that is where its parts are.
		if inner, err := message.Read(bytes.NewReader(opaque)); err == nil || softError(err) {
			e = inner
		}
	}
	c := collect(e)

	var d *Daticert
	if c.hasDaticert {
		if c.daticertErr == nil {
			d, c.daticertErr = parseDaticert(c.daticert, c.daticertUTF8)
		}
		if c.daticertErr != nil {
			r.DaticertError = "daticert.xml: " + c.daticertErr.Error()
		}
	}
	r.Daticert = d
	if from := r.Signature.SignedAtFrom; d != nil && !d.Data.IsZero() && from != "" && from != "signing time" {
		// No signing time: daticert's data is inside the signature, the
		// Date outside it, where anyone forwarding the receipt could set
		// it to a time the certificate was still valid.
		r.Signature, _ = checkSignature(raw, signedHeader, judgedAt{d.Data, "daticert"}, opts)
	}
	for name := range daticertFields(d) {
		r.Fields[name] = FromDaticert
	}

	if t, src, conflict := resolveType(h, r.Subject, d, c.hasDaticert); t != "" {
		r.Type, r.Fields["type"], r.TypeConflict = t, src, conflict
	}
	if r.Type != "" && !c.hasDaticert {
		r.DaticertError = "no daticert.xml"
	}

	switch v := strings.TrimSpace(h.Get("X-Tiporicevuta")); {
	case v != "":
		r.TipoRicevuta, r.Fields["tipo_ricevuta"] = strings.ToLower(v), FromHeaders
	case d != nil && d.Ricevuta != "":
		r.TipoRicevuta, r.Fields["tipo_ricevuta"] = d.Ricevuta, FromDaticert
	}

	r.VerificaSicurezza = strings.TrimSpace(h.Get("X-Verificasicurezza"))
	r.setKeys(h, d, c)
	r.Source = overall(r.Fields)
	return r
}

// softError reports whether err only says that a charset or transfer
// encoding is unknown: the entity is still there to be read.
func softError(err error) bool {
	return message.IsUnknownCharset(err) || message.IsUnknownEncoding(err)
}

// messageID returns the Message-ID without angle brackets, even when it does
// not follow RFC 5322 to the letter.
func messageID(h mail.Header) string {
	if id, err := h.MessageID(); err == nil {
		return id
	}
	return stripAngles(h.Get("Message-Id"))
}

// stripAngles returns the identifier between the first < and the next >,
// or v trimmed when it has none: providers write msg-ids both ways.
func stripAngles(v string) string {
	v = strings.TrimSpace(v)
	if i := strings.IndexByte(v, '<'); i >= 0 {
		if j := strings.IndexByte(v[i+1:], '>'); j >= 0 {
			return strings.TrimSpace(v[i+1 : i+1+j])
		}
	}
	return strings.TrimSpace(strings.Trim(v, "<>"))
}

// receiptType returns the Type an X-Ricevuta value names.
func receiptType(v string) (Type, bool) {
	switch t := Type(strings.ToLower(strings.TrimSpace(v))); t {
	case Accettazione, NonAccettazione, PresaInCarico, AvvenutaConsegna,
		ErroreConsegna, PreavvisoErroreConsegna, RilevazioneVirus:
		return t, true
	}
	return "", false
}

// envelopeType returns the Type an X-Trasporto value names.
func envelopeType(v string) (Type, bool) {
	switch t := Type(strings.ToLower(strings.TrimSpace(v))); t {
	case PostaCertificata, ErroreTrasporto:
		return t, true
	}
	return "", false
}

// subjectType returns the Type the rules' Subject prefix names, or "".
func subjectType(subject string) Type {
	s := strings.ToUpper(strings.TrimSpace(subject))
	for _, p := range []struct {
		prefix string
		t      Type
	}{
		{"ACCETTAZIONE:", Accettazione},
		// The variant "PER VIRUS" is the same receipt with errore="virus".
		{"AVVISO DI NON ACCETTAZIONE:", NonAccettazione},
		{"AVVISO DI NON ACCETTAZIONE PER VIRUS:", NonAccettazione},
		{"PRESA IN CARICO:", PresaInCarico},
		{"CONSEGNA:", AvvenutaConsegna},
		{"AVVISO DI MANCATA CONSEGNA:", ErroreConsegna},
		{"AVVISO DI MANCATA CONSEGNA PER VIRUS:", ErroreConsegna},
		// The rules give this prefix both to the 12-hour warning and to
		// the 24-hour final errore-consegna; resolveType lets daticert
		// tell them apart.
		{"AVVISO DI MANCATA CONSEGNA PER SUP. TEMPO MASSIMO:", PreavvisoErroreConsegna},
		{"PROBLEMA DI SICUREZZA:", RilevazioneVirus},
		{"POSTA CERTIFICATA:", PostaCertificata},
		{"ANOMALIA MESSAGGIO:", ErroreTrasporto},
	} {
		if strings.HasPrefix(s, p.prefix) {
			return p.t
		}
	}
	return ""
}

// resolveType says what kind of PEC message this is. What is signed wins:
// daticert's tipo, then X-Ricevuta or X-Trasporto, then the Subject
// prefix. The headers are outside the provider's signature, and a mailing
// list or anyone forwarding a genuine receipt can rewrite them: a signed
// errore-consegna must not be read as a delivery. conflict is the
// header's type when it names another than daticert.
func resolveType(h mail.Header, subject string, d *Daticert, hasDaticert bool) (t Type, src Source, conflict Type) {
	fromHeader, ok := receiptType(h.Get("X-Ricevuta"))
	if !ok {
		fromHeader, _ = envelopeType(h.Get("X-Trasporto"))
	}
	var fromDaticert Type
	if d != nil {
		if t, ok := receiptType(d.Tipo); ok {
			fromDaticert = t
		} else if t, ok := envelopeType(d.Tipo); ok {
			fromDaticert = t
		}
	}
	// A Subject alone is no proof: "CONSEGNA: ordine 12" may come from
	// anyone. It counts only on a message that shows some other mark of
	// a provider. Its prefixes are shared between two types (see
	// subjectType), so its disagreeing with daticert is no conflict.
	var fromSubject Type
	if fromHeader == "" && (hasDaticert || looksLikePEC(h)) {
		fromSubject = subjectType(subject)
	}
	switch named := cmp.Or(fromHeader, fromSubject); {
	case named != "" && (fromDaticert == "" || fromDaticert == named):
		return named, FromHeaders, ""
	case fromDaticert != "":
		return fromDaticert, FromDaticert, fromHeader
	}
	return "", "", ""
}

// looksLikeProvider reports whether the header names the kind of PEC
// message it is, as only a provider writes it.
func looksLikeProvider(h mail.Header) bool {
	return h.Has("X-Ricevuta") || h.Has("X-Trasporto")
}

// looksLikePEC reports whether the header carries a mark only PEC
// providers put there.
func looksLikePEC(h mail.Header) bool {
	for _, k := range []string{"X-Ricevuta", "X-Trasporto", "X-Riferimento-Message-Id", "X-Tiporicevuta"} {
		if h.Has(k) {
			return true
		}
	}
	return strings.Contains(strings.ToLower(h.Get("From")), "posta-certificata@")
}

// setKeys finds what ties the receipt to the original message, and records
// where each key was read.
func (r *Receipt) setKeys(h mail.Header, d *Daticert, c *contents) {
	// What is signed wins: daticert.xml is inside the provider's
	// signature, X-Riferimento-Message-ID outside it.
	header := stripAngles(h.Get("X-Riferimento-Message-Id"))
	switch {
	case d != nil && d.MsgID != "":
		r.Keys.MessageID, r.Fields["message_id"] = d.MsgID, FromDaticert
		if header != "" && header != d.MsgID {
			r.MessageIDConflict = header
		}
	case header != "":
		r.Keys.MessageID, r.Fields["message_id"] = header, FromHeaders
	}

	if d != nil && d.Identificativo != "" {
		r.Keys.Identificativo, r.Fields["identificativo"] = d.Identificativo, FromDaticert
	} else if r.Type == PostaCertificata && r.MessageID != "" {
		// A transport envelope goes out under the identificativo the
		// sender's provider gave the message.
		r.Keys.Identificativo, r.Fields["identificativo"] = r.MessageID, FromHeaders
	} else if id := identificativoInText(c.text); id != "" && r.Type != "" {
		// Only a provider's text is trusted to name the identificativo.
		r.Keys.Identificativo, r.Fields["identificativo"] = id, FromBody
	}

	if c.attached != nil {
		if id := strings.TrimSpace(c.attached.Get("X-Genro-Mail-Id")); id != "" {
			r.Keys.MailID, r.Fields["mail_id"] = id, FromHeaders
		}
	}
}

// identificativoRE finds "Identificativo del messaggio: …" (or
// "Identificativo messaggio: …") in the provider's text, which every
// provider writes even when it leaves daticert.xml out.
var identificativoRE = regexp.MustCompile(`(?i)identificativo\s+(?:del\s+)?messaggio\s*:\s*<?([^\s<>"]+)`)

func identificativoInText(text string) string {
	m := identificativoRE.FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	return strings.TrimRight(m[1], ".,;")
}

// overall sums up where the type and the keys were read.
func overall(fields map[string]Source) Source {
	var daticert, own bool
	for _, name := range []string{"type", "message_id", "identificativo", "mail_id"} {
		switch fields[name] {
		case "":
		case FromDaticert:
			daticert = true
		default:
			own = true
		}
	}
	switch {
	case daticert && own:
		return FromBoth
	case daticert:
		return FromDaticert
	case own:
		return FromHeaders
	}
	return ""
}
