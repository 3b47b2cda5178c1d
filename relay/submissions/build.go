package submissions

import (
	"bytes"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"github.com/emersion/go-message/mail"

	"github.com/genropy/postino/relay/intake"
)

// row is one submission as the claim reads it.
type row struct {
	id, from string
	rcpts    string // JSON array
	message  []byte // nil when NULL: the parts form
	priority int
	batch    sql.NullString
	// sendAfter is Unix seconds.
	sendAfter            sql.NullInt64
	subject, text, html  sql.NullString
	headers, attachments sql.NullString
}

func (r *row) scan(rows *sql.Rows) error {
	return rows.Scan(&r.id, &r.from, &r.rcpts, &r.message, &r.priority, &r.batch, &r.sendAfter,
		&r.subject, &r.text, &r.html, &r.headers, &r.attachments)
}

// envelope is what the row says of its message beside the bytes: the
// id, the addresses and the controls the columns set; source names where
// it was read.
func (r *row) envelope(source string) (intake.Envelope, error) {
	env := intake.Envelope{ID: r.id, From: r.from, Helo: source, Protocol: "SQL",
		Control: map[string]string{intake.HeaderPriority: strconv.Itoa(r.priority)}}
	if r.batch.Valid {
		env.Control[intake.HeaderBatch] = r.batch.String
	}
	if r.sendAfter.Valid {
		env.Control[intake.HeaderSendAfter] = strconv.FormatInt(r.sendAfter.Int64, 10)
	}
	if err := json.Unmarshal([]byte(r.rcpts), &env.To); err != nil {
		return env, fmt.Errorf("rcpt_to is not a list of addresses: %w", err)
	}
	// Only addresses say whether SMTPUTF8 is needed: the app has no other
	// way to ask for it.
	env.UTF8 = !intake.ASCIIAddresses(env.From, env.To)
	return env, nil
}

// attachment is one element of the attachments column.
type attachment struct {
	Filename    string `json:"filename"`
	ContentType string `json:"content_type"`
	Content     string `json:"content"`
}

// bytes is the message of the row: its message column, or one built from
// its parts.
func (r *row) bytes() ([]byte, error) {
	if r.message != nil {
		return r.message, nil
	}
	return r.build()
}

// build makes a MIME message of the row's parts: the text and HTML bodies
// (multipart/alternative when both), the attachments (multipart/mixed
// around them), the subject, the extra headers, and From and To from the
// envelope when the headers give none. Date and Message-ID are intake's to
// add, as for any message without them.
func (r *row) build() ([]byte, error) {
	if !r.text.Valid && !r.html.Valid && !r.attachments.Valid {
		return nil, errors.New("the submission has no message, text_body, html_body nor attachments: give message, or at least one body")
	}
	var h mail.Header
	if err := r.header(&h); err != nil {
		return nil, err
	}
	var atts []attachment
	if r.attachments.Valid {
		if err := json.Unmarshal([]byte(r.attachments.String), &atts); err != nil {
			return nil, fmt.Errorf("attachments is not a JSON array of {filename, content_type, content}: %w", err)
		}
	}
	var b bytes.Buffer
	if err := writeBody(&b, h, r.texts(), atts); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// text is a body of the message, of its content type.
type text struct{ body, contentType string }

// texts are the row's text and HTML bodies, those it has.
func (r *row) texts() []text {
	var out []text
	if r.text.Valid {
		out = append(out, text{r.text.String, "text/plain"})
	}
	if r.html.Valid {
		out = append(out, text{r.html.String, "text/html"})
	}
	return out
}

// writeBody writes the message of header h: the texts, one part or
// multipart/alternative, in multipart/mixed with the attachments when
// there are any.
func writeBody(w io.Writer, h mail.Header, texts []text, atts []attachment) error {
	h.Set("MIME-Version", "1.0")
	if len(atts) == 0 && len(texts) == 1 {
		return writeText(func(ph mail.InlineHeader) (io.WriteCloser, error) {
			h.Set("Content-Type", ph.Get("Content-Type"))
			return mail.CreateSingleInlineWriter(w, h)
		}, texts[0])
	}
	if len(atts) == 0 {
		iw, err := mail.CreateInlineWriter(w, h)
		if err != nil {
			return err
		}
		return writeAlternative(iw, texts)
	}
	mw, err := mail.CreateWriter(w, h)
	if err != nil {
		return err
	}
	switch len(texts) {
	case 1:
		err = writeText(mw.CreateSingleInline, texts[0])
	case 2:
		var iw *mail.InlineWriter
		if iw, err = mw.CreateInline(); err == nil {
			err = writeAlternative(iw, texts)
		}
	}
	if err != nil {
		return err
	}
	for i, a := range atts {
		if err := writeAttachment(mw, i, a); err != nil {
			return err
		}
	}
	return mw.Close()
}

// writeText writes t as the part create makes.
func writeText(create func(mail.InlineHeader) (io.WriteCloser, error), t text) error {
	var ph mail.InlineHeader
	ph.Set("Content-Type", t.contentType+"; charset=utf-8")
	pw, err := create(ph)
	if err != nil {
		return err
	}
	if _, err := io.WriteString(pw, t.body); err != nil {
		return err
	}
	return pw.Close()
}

// writeAlternative writes the texts as the parts of iw.
func writeAlternative(iw *mail.InlineWriter, texts []text) error {
	for _, t := range texts {
		if err := writeText(iw.CreatePart, t); err != nil {
			return err
		}
	}
	return iw.Close()
}

// header sets the subject, the extra headers, and From and To unless they
// give them.
func (r *row) header(h *mail.Header) error {
	if r.headers.Valid {
		var extra map[string]string
		if err := json.Unmarshal([]byte(r.headers.String), &extra); err != nil {
			return fmt.Errorf("headers is not a JSON object of names and text values: %w", err)
		}
		for _, k := range slices.Sorted(maps.Keys(extra)) {
			if strings.ContainsAny(k, ": \t\r\n") || k == "" {
				return fmt.Errorf("headers: %q is not a header field name", k)
			}
			v := extra[k]
			if strings.ContainsAny(v, "\r\n") {
				return fmt.Errorf("headers: the value of %s holds a line break; give it on one line", k)
			}
			if err := setField(h, k, v); err != nil {
				return err
			}
		}
	}
	if r.subject.Valid {
		h.SetSubject(r.subject.String)
	}
	if !h.Has("From") && r.from != "" {
		h.SetAddressList("From", []*mail.Address{{Address: r.from}})
	}
	if !h.Has("To") {
		var to []string
		if err := json.Unmarshal([]byte(r.rcpts), &to); err != nil {
			return fmt.Errorf("rcpt_to is not a list of addresses: %w", err)
		}
		list := make([]*mail.Address, len(to))
		for i, a := range to {
			list[i] = &mail.Address{Address: a}
		}
		h.SetAddressList("To", list)
	}
	return nil
}

// setField sets the extra header k to v, encoded only where it needs to be
// (RFC 2047). An address field is an address list: only its display names
// may be encoded words, so a whole mailbox encoded as one word reads as an
// address without a domain.
func setField(h *mail.Header, k, v string) error {
	if !isAddressField(k) {
		h.SetText(k, v)
		return nil
	}
	list, err := mail.ParseAddressList(v)
	if err != nil {
		return fmt.Errorf("headers: %s %q is not an address list (%v); write it as Name <user@example.com>, "+
			"several separated by commas, and a name holding a comma or a quote in double quotes (\"Doe, Jane\" <jane@example.com>)", k, v, err)
	}
	formatted := make([]string, len(list))
	for i, a := range list {
		formatted[i] = formatAddress(a)
	}
	h.Set(k, strings.Join(formatted, ", "))
	return nil
}

// formatAddress writes a mailbox with its display name, when not plain
// ASCII, in one encoded word. RFC 2047 splits a longer word into several,
// but Python's email package keeps the space between two encoded words of a
// name, which decoders that keep the RFC drop: the same name read two ways.
// One word, over 75 octets if need be, reads the same in both.
// A mailbox without a name stays a bare address, as the app wrote it.
func formatAddress(a *mail.Address) string {
	addr := (&mail.Address{Address: a.Address}).String()
	switch {
	case a.Name == "":
		return strings.TrimSuffix(strings.TrimPrefix(addr, "<"), ">")
	case isPrintableASCII(a.Name):
		return a.String()
	}
	return "=?utf-8?b?" + base64.StdEncoding.EncodeToString([]byte(a.Name)) + "?= " + addr
}

func isPrintableASCII(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r > '~' })
}

// isAddressField says whether the field named k holds an address list
// (RFC 5322 sections 3.6.2, 3.6.3 and 3.6.6, RFC 8098's
// Disposition-Notification-To).
func isAddressField(k string) bool {
	switch textproto.CanonicalMIMEHeaderKey(k) {
	case "From", "Sender", "Reply-To", "To", "Cc", "Bcc",
		"Resent-From", "Resent-Sender", "Resent-To", "Resent-Cc", "Resent-Bcc", "Disposition-Notification-To":
		return true
	}
	return false
}

func writeAttachment(mw *mail.Writer, i int, a attachment) error {
	content, err := base64.StdEncoding.DecodeString(a.Content)
	if err != nil {
		return fmt.Errorf("attachments[%d] (%s): content is not base64: %w", i, a.Filename, err)
	}
	if a.Filename == "" {
		return fmt.Errorf("attachments[%d]: give it a filename", i)
	}
	ct := a.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	var ah mail.AttachmentHeader
	ah.Set("Content-Type", ct)
	ah.SetFilename(a.Filename)
	aw, err := mw.CreateAttachment(ah)
	if err != nil {
		return err
	}
	if _, err := aw.Write(content); err != nil {
		return err
	}
	return aw.Close()
}
