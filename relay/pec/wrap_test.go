package pec_test

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/genropy/postino/relay/pec"
	"github.com/genropy/postino/relay/pec/pectest"
)

// splitMessage returns a message's header fields, each with its folded
// lines, and its body.
func splitMessage(t *testing.T, raw []byte) (fields []string, body []byte) {
	t.Helper()
	head, body, ok := bytes.Cut(raw, []byte("\r\n\r\n"))
	if !ok {
		t.Fatal("message without a body")
	}
	for _, line := range strings.Split(string(head), "\r\n") {
		if n := len(fields); n > 0 && (strings.HasPrefix(line, " ") || strings.HasPrefix(line, "\t")) {
			fields[n-1] += "\r\n" + line
			continue
		}
		fields = append(fields, line)
	}
	return fields, body
}

// listCopy is a receipt as a mailing list that adds a footer sends it on:
// its header fields kept (the Subject tagged), its body made the first part
// of a multipart/mixed whose second part is the footer.
func listCopy(t *testing.T, receipt []byte) []byte {
	t.Helper()
	fields, body := splitMessage(t, receipt)
	var out, part strings.Builder
	for _, f := range fields {
		switch name, _, _ := strings.Cut(f, ":"); strings.ToLower(name) {
		case "content-type", "content-transfer-encoding":
			part.WriteString(f + "\r\n")
		case "subject":
			out.WriteString("Subject: [soci] " + strings.TrimSpace(f[len("Subject:"):]) + "\r\n")
		default:
			out.WriteString(f + "\r\n")
		}
	}
	out.WriteString("List-Id: Soci <soci.lista.test>\r\nContent-Type: multipart/mixed; boundary=\"lista\"\r\n\r\n")
	out.WriteString("--lista\r\n" + part.String() + "\r\n" + string(body) + "\r\n--lista\r\n")
	out.WriteString("Content-Type: text/plain; charset=utf-8\r\n\r\n--\r\nLista soci: https://lista.test/soci\r\n--lista--\r\n")
	return []byte(out.String())
}

// forward is a receipt attached whole to a message, as a mail client
// forwards it; extra are header fields of the outer message, encoding the
// attachment's transfer encoding.
func forward(receipt []byte, extra, encoding string) []byte {
	part, attached := "Content-Type: message/rfc822\r\n", string(receipt)
	if encoding == "base64" {
		part += "Content-Transfer-Encoding: base64\r\n"
		attached = base64.StdEncoding.EncodeToString(receipt)
	}
	return []byte("From: Segreteria <segreteria@ufficio.test>\r\nTo: archivio@ufficio.test\r\nSubject: I: ricevuta\r\n" +
		"Message-ID: <inoltro.1@ufficio.test>\r\nDate: Mon, 04 Mar 2024 09:00:00 +0100\r\n" + extra +
		"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"inoltro\"\r\n\r\n" +
		"--inoltro\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nVedi la ricevuta qui sotto.\r\n" +
		"--inoltro\r\n" + part + "\r\n" + attached + "\r\n--inoltro--\r\n")
}

// TestParseWrapped checks that a receipt a mailing list or a forward put
// inside another message has its own signature checked there, and that
// what it came inside is told.
func TestParseWrapped(t *testing.T) {
	ca := pectest.NewCA(t)
	receipt := func(o pectest.ReceiptOptions) []byte {
		o.Original, o.Date, o.Recipients = []byte(original), sent, recipients
		return ca.Receipt(t, o)
	}
	consegna := receipt(pectest.ReceiptOptions{Type: pec.AvvenutaConsegna})
	tampered := receipt(pectest.ReceiptOptions{Type: pec.AvvenutaConsegna, Tamper: true})
	opaque := receipt(pectest.ReceiptOptions{Type: pec.Accettazione, Opaque: true})

	tests := []struct {
		name    string
		raw     []byte
		typ     pec.Type
		status  pec.SignatureStatus
		errWith string
		how     string
		listID  string
		from    string
	}{
		{"list copy", listCopy(t, consegna), pec.AvvenutaConsegna, pec.SignatureValid, "", pec.Wrapped, "Soci <soci.lista.test>", ""},
		{"list copy, stored with LF", bytes.ReplaceAll(listCopy(t, consegna), []byte("\r\n"), []byte("\n")),
			pec.AvvenutaConsegna, pec.SignatureValid, "", pec.Wrapped, "Soci <soci.lista.test>", ""},
		{"list copy, opaque", listCopy(t, opaque), pec.Accettazione, pec.SignatureValid, "", pec.Wrapped, "Soci <soci.lista.test>", ""},
		{"list copy, tampered", listCopy(t, tampered), pec.AvvenutaConsegna, pec.SignatureInvalid, "altered", pec.Wrapped, "Soci <soci.lista.test>", ""},
		{"forwarded", forward(consegna, "", ""), pec.AvvenutaConsegna, pec.SignatureValid, "", pec.Forwarded, "", "segreteria@ufficio.test"},
		{"forwarded, base64", forward(consegna, "", "base64"), pec.AvvenutaConsegna, pec.SignatureValid, "", pec.Forwarded, "", "segreteria@ufficio.test"},
		{"forwarded, stored with LF", bytes.ReplaceAll(forward(consegna, "", ""), []byte("\r\n"), []byte("\n")),
			pec.AvvenutaConsegna, pec.SignatureValid, "", pec.Forwarded, "", "segreteria@ufficio.test"},
		{"forwarded, opaque", forward(opaque, "", ""), pec.Accettazione, pec.SignatureValid, "", pec.Forwarded, "", "segreteria@ufficio.test"},
		{"forwarded, tampered", forward(tampered, "", ""), pec.AvvenutaConsegna, pec.SignatureInvalid, "altered", pec.Forwarded, "", "segreteria@ufficio.test"},
		{
			// A list that wraps every message (for DMARC) attaches it.
			"list copy, attached", forward(consegna, "List-Id: <soci.lista.test>\r\n", ""),
			pec.AvvenutaConsegna, pec.SignatureValid, "", pec.Forwarded, "<soci.lista.test>", "segreteria@ufficio.test",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := pec.Parse(tt.raw, pec.Options{Roots: ca.Pool(), Now: checkAt})
			if err != nil {
				t.Fatal(err)
			}
			if s := r.Signature; s.Status != tt.status || s.Signer != signerName || !strings.Contains(s.Error, tt.errWith) || (tt.errWith == "" && s.Error != "") {
				t.Errorf("signature = %+v, want %q with error %q", s, tt.status, tt.errWith)
			}
			if w := r.WrappedIn; w == nil || w.How != tt.how || w.ListID != tt.listID || w.From != tt.from {
				t.Errorf("wrapped in %+v, want %s, list %q, from %q", w, tt.how, tt.listID, tt.from)
			}
			// The receipt's own fields, read from what its signature covers.
			if r.Type != tt.typ || r.Daticert == nil || r.Keys.MessageID != "20240301.1234@postino.test" || r.Keys.Identificativo == "" ||
				r.Fields["message_id"] != pec.FromDaticert || !r.Date.Equal(sent) {
				t.Errorf("type %q, daticert %+v (%s), keys %+v, fields %v, date %v", r.Type, r.Daticert, r.DaticertError, r.Keys, r.Fields, r.Date)
			}
			if !strings.Contains(r.Subject, "Fattura 2024/17") {
				t.Errorf("subject %q, want the receipt's", r.Subject)
			}
		})
	}
}

// TestParseNotWrapped checks what is not taken for a wrapped receipt: a
// provider's own message attaching one (an envelope's postacert.eml), a
// signed message that is not PEC, and a receipt that is signed itself.
func TestParseNotWrapped(t *testing.T) {
	ca := pectest.NewCA(t)
	signed := ca.Receipt(t, pectest.ReceiptOptions{Type: pec.Accettazione, Original: []byte(original), Date: sent})
	notPEC := bytes.Replace(bytes.Replace(signed, []byte("X-Ricevuta:"), []byte("X-Nota:"), 1),
		[]byte("X-Riferimento-Message-ID:"), []byte("X-Rif:"), 1)
	notPEC = bytes.Replace(notPEC, []byte("X-TipoRicevuta:"), []byte("X-Tipo:"), 1)
	notPEC = bytes.Replace(notPEC, []byte("posta-certificata@"), []byte("ufficio@"), -1)

	tests := []struct {
		name   string
		raw    []byte
		typ    pec.Type
		status pec.SignatureStatus
	}{
		{"signed receipt", signed, pec.Accettazione, pec.SignatureValid},
		{
			// Someone sent a receipt as certified mail, and the envelope
			// lost its signature: the envelope is what this is.
			"unsigned envelope of a receipt", ca.Receipt(t, pectest.ReceiptOptions{Type: pec.PostaCertificata, Original: signed, Date: sent, Unsigned: true}),
			pec.PostaCertificata, pec.SignatureInvalid,
		},
		{"forwarded signed message that is not PEC", forward(notPEC, "", ""), "", pec.SignatureInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := pec.Parse(tt.raw, pec.Options{Roots: ca.Pool(), Now: checkAt})
			if err != nil {
				t.Fatal(err)
			}
			if r.WrappedIn != nil || r.Type != tt.typ || r.Signature.Status != tt.status {
				t.Errorf("wrapped in %+v, type %q, signature %+v; want not wrapped, %q, %q", r.WrappedIn, r.Type, r.Signature, tt.typ, tt.status)
			}
		})
	}
}

// What is signed wins for the type too: a genuine errore-consegna whose
// header, outside the signature, was rewritten to say avvenuta-consegna
// (by anyone who forwards it, or a mailing list) is still a failed
// delivery, and the conflict is reported.
func TestParseTypeFromDaticert(t *testing.T) {
	ca := pectest.NewCA(t)
	raw := ca.Receipt(t, pectest.ReceiptOptions{Type: pec.ErroreConsegna, Original: []byte(original), Date: sent})
	forged := bytes.Replace(raw, []byte("X-Ricevuta: errore-consegna"), []byte("X-Ricevuta: avvenuta-consegna"), 1)
	if bytes.Equal(forged, raw) {
		t.Fatal("the receipt has no X-Ricevuta: errore-consegna to rewrite")
	}
	for name, m := range map[string][]byte{"as sent": forged, "list copy": listCopy(t, forged)} {
		t.Run(name, func(t *testing.T) {
			r, err := pec.Parse(m, pec.Options{Roots: ca.Pool(), Now: checkAt})
			if err != nil {
				t.Fatal(err)
			}
			if r.Type != pec.ErroreConsegna || r.Fields["type"] != pec.FromDaticert {
				t.Errorf("type %s from %s, want %s from daticert", r.Type, r.Fields["type"], pec.ErroreConsegna)
			}
			if r.TypeConflict != pec.AvvenutaConsegna {
				t.Errorf("type conflict %q, want %s", r.TypeConflict, pec.AvvenutaConsegna)
			}
			if r.Signature.Status != pec.SignatureValid {
				t.Errorf("signature %s, want valid", r.Signature.Status)
			}
		})
	}
}
