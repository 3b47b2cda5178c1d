// Package pec reads Italian certified mail (posta elettronica certificata)
// as it comes back to a sender: the receipts of the providers (DM 2
// novembre 2005 and its annex; RFC 6109 in English), their daticert.xml,
// and the S/MIME signature that gives them legal value.
package pec

import (
	"crypto/x509"
	"time"
)

// Type is the kind of a PEC message, from X-Ricevuta for receipts and
// X-Trasporto for envelopes.
type Type string

const (
	Accettazione            Type = "accettazione"
	NonAccettazione         Type = "non-accettazione"
	PresaInCarico           Type = "presa-in-carico"
	AvvenutaConsegna        Type = "avvenuta-consegna"
	ErroreConsegna          Type = "errore-consegna"
	PreavvisoErroreConsegna Type = "preavviso-errore-consegna"
	RilevazioneVirus        Type = "rilevazione-virus"
	// Envelopes (X-Trasporto): a certified message received, and the
	// anomaly envelope of a message that is not certified.
	PostaCertificata Type = "posta-certificata"
	ErroreTrasporto  Type = "errore"
)

// Source says where a receipt's fields were read.
type Source string

const (
	FromHeaders  Source = "headers"
	FromDaticert Source = "daticert"
	FromBoth     Source = "both"
	// FromBody is the provider's human-readable text, the last resort for
	// a field no header or daticert.xml carries. Overall, it counts as
	// the receipt's own content, like the headers.
	FromBody Source = "body"
)

// Recipient is one destinatari of daticert.xml.
type Recipient struct {
	Address string `json:"address"`
	// Type is certificato (a PEC mailbox) or esterno (ordinary mail).
	Type string `json:"type,omitempty"`
}

// Daticert is the daticert.xml a receipt carries.
type Daticert struct {
	// Tipo and Errore are the postacert element's attributes.
	Tipo             string      `json:"tipo"`
	Errore           string      `json:"errore,omitempty"`
	Mittente         string      `json:"mittente,omitempty"`
	Destinatari      []Recipient `json:"destinatari,omitempty"`
	Risposte         string      `json:"risposte,omitempty"`
	Oggetto          string      `json:"oggetto,omitempty"`
	GestoreEmittente string      `json:"gestore_emittente,omitempty"`
	// Data is giorno, ora and zona as one time, with its offset.
	Data           time.Time `json:"data,omitzero"`
	Identificativo string    `json:"identificativo,omitempty"`
	MsgID          string    `json:"msgid,omitempty"`
	// Ricevuta is the ricevuta element's tipo: completa, breve, sintetica.
	Ricevuta     string `json:"ricevuta,omitempty"`
	Consegna     string `json:"consegna,omitempty"`
	Ricezione    string `json:"ricezione,omitempty"`
	ErroreEsteso string `json:"errore_esteso,omitempty"`
}

// SignatureStatus is the result of the S/MIME check.
type SignatureStatus string

const (
	SignatureValid      SignatureStatus = "valid"
	SignatureInvalid    SignatureStatus = "invalid"
	SignatureNotChecked SignatureStatus = "not checked"
)

// Signature is what the S/MIME check found.
type Signature struct {
	Status SignatureStatus `json:"status"`
	// Signer names the certificate that signed (its subject), when read.
	Signer string `json:"signer,omitempty"`
	// Error says why the signature is invalid or was not checked.
	Error string `json:"error,omitempty"`
	// SignedAt is the time a valid signature was judged at, and
	// SignedAtFrom where that time was read (for an invalid one too): the
	// signature's "signing time", else "daticert" (its data, inside the
	// signature), else the receipt's "date" (outside it), else
	// "received".
	SignedAt     time.Time `json:"signed_at,omitzero"`
	SignedAtFrom string    `json:"signed_at_from,omitempty"`
	// CertificateExpired is when the signing certificate expired, when it
	// had by the time the receipt was received: an old receipt, not a
	// forged one.
	CertificateExpired time.Time `json:"certificate_expired,omitzero"`
}

// Keys tie a receipt to the message it is about, in the order they are
// tried.
type Keys struct {
	// MessageID is daticert's msgid, or X-Riferimento-Message-ID, without
	// angle brackets: the Message-ID the sender gave the original.
	MessageID string `json:"message_id,omitempty"`
	// Identificativo is the provider's id of the message, the same in
	// every receipt of it.
	Identificativo string `json:"identificativo,omitempty"`
	// MailID is the X-Genro-Mail-ID of an attached postacert.eml.
	MailID string `json:"mail_id,omitempty"`
}

// Receipt is what one message of a PEC mailbox says.
type Receipt struct {
	// Type is empty when the message is not PEC at all.
	Type Type `json:"type"`
	// Source says where Type and the keys were read; Fields says it for
	// every field, by name.
	Source Source            `json:"source"`
	Fields map[string]Source `json:"fields,omitempty"`
	// TipoRicevuta is the X-TipoRicevuta header: completa, breve, sintetica.
	TipoRicevuta string `json:"tipo_ricevuta,omitempty"`
	// MessageID, Subject and Date are the receipt's own.
	MessageID string    `json:"message_id,omitempty"`
	Subject   string    `json:"subject,omitempty"`
	Date      time.Time `json:"date,omitzero"`
	// Daticert is nil when the receipt has none or it does not parse;
	// DaticertError then says why.
	Daticert      *Daticert `json:"daticert,omitempty"`
	DaticertError string    `json:"daticert_error,omitempty"`
	Keys          Keys      `json:"keys"`
	// MessageIDConflict is X-Riferimento-Message-ID when it names another
	// message than daticert.xml's msgid, which is the one used: the
	// header is outside the signature.
	MessageIDConflict string `json:"message_id_conflict,omitempty"`
	// TypeConflict is the type X-Ricevuta or X-Trasporto names when it is
	// another than daticert.xml's tipo, which is the one used: the header
	// is outside the signature.
	TypeConflict Type `json:"type_conflict,omitempty"`
	// VerificaSicurezza is the X-VerificaSicurezza header a provider
	// writes on an envelope it could not check whole ("errore" when the
	// sender's provider's signature did not verify).
	VerificaSicurezza string    `json:"verifica_sicurezza,omitempty"`
	Signature         Signature `json:"signature"`
	// WrappedIn is the unsigned message the receipt came inside: a
	// forward, or a mailing list's copy. The signature and the fields are
	// the receipt's own, read inside it.
	WrappedIn *Wrapper `json:"wrapped_in,omitempty"`
}

// How a receipt came inside another message.
const (
	// Forwarded: attached whole, as message/rfc822, to another message.
	Forwarded = "forwarded"
	// Wrapped: its signed body is one part of a message that kept its
	// header fields, as a mailing list leaves it when it adds a footer.
	Wrapped = "wrapped"
)

// Wrapper is an unsigned message a receipt came inside.
type Wrapper struct {
	// How is Forwarded or Wrapped.
	How string `json:"how"`
	// From and Subject are a forward's; a list's copy keeps the receipt's.
	From    string `json:"from,omitempty"`
	Subject string `json:"subject,omitempty"`
	// ListID is the List-Id of a mailing list's copy.
	ListID string `json:"list_id,omitempty"`
}

// String says in a few words what the receipt came inside.
func (w Wrapper) String() string {
	s := w.How
	if w.How == Forwarded {
		s += " inside a message"
	} else {
		s += " in a message"
	}
	if w.ListID != "" {
		s += " of the list " + w.ListID
	}
	if w.From != "" {
		s += " from " + w.From
	}
	return s
}

// Options say what the reader cannot know from a message alone.
type Options struct {
	// Roots are the certificate authorities of the PEC providers (the
	// trust bundle); nil leaves signatures not checked.
	Roots *x509.CertPool
	// Now is when the receipt was received; zero is now. Signatures are
	// judged at the time they were made, and a certificate that expired
	// by Now is reported as such (Signature.CertificateExpired).
	Now time.Time
}
