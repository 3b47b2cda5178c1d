package bounce

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/emersion/go-message"
	_ "github.com/emersion/go-message/charset" // RFC 2047 words and bodies in any charset
	"github.com/emersion/go-message/mail"
	"github.com/emersion/go-message/textproto"
)

// Limits that keep a hostile or broken message from costing more than a
// real bounce ever needs: everything a bounce says is near its top.
const (
	maxMessageSize = 32 << 20 // bytes read of the whole message
	maxPartSize    = 4 << 20  // bytes read of one part
	maxTextSize    = 256 << 10
	maxDepth       = 12 // nested multiparts and messages
	maxParts       = 256
)

// errNotMessage is returned for input without a single header field.
var errNotMessage = errors.New("bounce: input is not a message")

// Parse reads one whole message (RFC 5322, CRLF or LF line endings) and
// says what it is. It returns an error only when the input cannot be read
// or has no header at all; a message it does not understand is reported as
// KindNotBounce.
//
// The readings are tried from the most structured to the least:
//
//   - A feedback report (ARF, RFC 5965, and Outlook.com's and Apple Mail's
//     own) is KindComplaint; its recipients are the complaining addresses
//     (Original-Rcpt-To, Removal-Recipient, else the reported message's To).
//   - A DSN (RFC 3464) gives one Recipient per per-recipient block. The
//     report is KindBounce if any recipient failed, KindDelay if none did
//     but some are delayed, and KindNotBounce if all were delivered,
//     relayed or expanded: a success report is nothing to act on, and its
//     recipients say what became of them.
//   - An Amazon SES notification sent as mail is read as its JSON says.
//   - Other bounces are read from their text: the layout and wording real
//     MTAs use (see heuristics.go).
//   - An automatic reply (RFC 3834 and the marks vacation programs use) is
//     KindAutoReply; its recipient is its sender, and Keys.MessageID is the
//     message it answers (In-Reply-To).
//
// Recipient.Status is the enhanced status code as written: the remote
// server's, in its reply, when it wrote a specific one, else the report's
// Status field; never made up. Recipient.Diagnostic is the remote reply
// without its "smtp;" type; other types ("X-Unix; 67") are kept.
func Parse(r io.Reader, opts Options) (*Report, error) {
	raw, err := io.ReadAll(io.LimitReader(r, maxMessageSize))
	if err != nil {
		return nil, fmt.Errorf("bounce: read message: %w", err)
	}
	m, err := readMessage(raw)
	if err != nil {
		return nil, err
	}
	return m.report(opts), nil
}

// msg is what the reader collects from the MIME tree of a bounce.
type msg struct {
	header     mail.Header
	subject    string
	reportType string       // report-type of the first multipart/report
	texts      []string     // human-readable parts, outside the returned message
	status     []string     // message/delivery-status parts
	feedback   string       // the first message/feedback-report part
	returned   *mail.Header // header of the returned message, attached or as headers only
	inner      []byte       // the returned message whole, when attached: it may be a bounce forwarded
	nested     int          // how many bounces this one is forwarded in
	parts      int          // parts walked so far
}

// readMessage reads the header and the MIME tree of raw.
func readMessage(raw []byte) (*msg, error) {
	// Blank lines before the header (a message saved by hand, a
	// mailbox export) are not an empty header.
	raw = bytes.TrimLeft(skipMboxLine(bytes.TrimLeft(raw, " \t\r\n")), " \t\r\n")
	ent, err := message.Read(bytes.NewReader(raw))
	if err != nil && !benign(err) {
		// Real bounces carry broken header lines; keep the fields that
		// are fields rather than give up on the message.
		ent, err = message.Read(bytes.NewReader(repairHeader(raw)))
		if err != nil && !benign(err) {
			return nil, fmt.Errorf("%w: %w", errNotMessage, err)
		}
	}
	if ent.Header.Len() == 0 {
		return nil, errNotMessage
	}
	m := &msg{header: mail.Header{Header: ent.Header}}
	m.subject = headerText(ent.Header, "Subject")
	m.walk(ent, 0)
	return m, nil
}

// benign tells the errors go-message returns along with a usable entity.
func benign(err error) bool {
	return message.IsUnknownCharset(err) || message.IsUnknownEncoding(err)
}

// skipMboxLine drops the "From sender date" line mbox files start with.
func skipMboxLine(raw []byte) []byte {
	if bytes.HasPrefix(raw, []byte("From ")) {
		if i := bytes.IndexByte(raw, '\n'); i >= 0 {
			return raw[i+1:]
		}
	}
	return raw
}

// headerKeyRe matches the start of a header field: a name of printable
// characters and a colon.
var headerKeyRe = regexp.MustCompile(`^[!-9;-~]+[ \t]*:`)

// repairHeader keeps the header lines that are fields or continue one and
// drops the rest, so that the strict header reader accepts the message.
func repairHeader(raw []byte) []byte {
	end := len(raw)
	sep := 0
	for _, s := range [][]byte{[]byte("\r\n\r\n"), []byte("\n\n")} {
		if i := bytes.Index(raw, s); i >= 0 && i < end {
			end, sep = i, len(s)
		}
	}
	var out bytes.Buffer
	kept := false
	for _, line := range bytes.SplitAfter(raw[:end], []byte("\n")) {
		switch {
		case headerKeyRe.Match(line):
			kept = true
		case kept && len(line) > 0 && (line[0] == ' ' || line[0] == '\t'):
		default:
			kept = false
			continue
		}
		out.Write(bytes.TrimRight(line, "\r\n"))
		out.WriteString("\r\n")
	}
	if out.Len() == 0 {
		return nil
	}
	out.WriteString("\r\n")
	if end < len(raw) {
		out.Write(raw[end+sep:])
	}
	return out.Bytes()
}

// walk collects the parts of e. Parts inside a returned message are not
// walked: their text is the original's, not the bounce's.
func (m *msg) walk(e *message.Entity, depth int) {
	m.parts++
	if depth > maxDepth || m.parts > maxParts {
		return
	}
	mediaType, params := contentType(e.Header)
	if !strings.HasPrefix(mediaType, "multipart/") {
		body, _ := io.ReadAll(io.LimitReader(e.Body, maxPartSize))
		m.addPart(e.Header, mediaType, body)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(e.Body, maxMessageSize))
	if mediaType == "multipart/report" && m.reportType == "" {
		m.reportType = strings.ToLower(params["report-type"])
	}
	if !m.walkMultipart(body, params["boundary"], depth) {
		m.addText(mediaType, body)
	}
}

// addPart keeps what a part that is not multipart says, by its media type.
// An attachment is kept only when it is text.
func (m *msg) addPart(h message.Header, mediaType string, body []byte) {
	switch mediaType {
	case "message/delivery-status", "message/global-delivery-status":
		m.status = append(m.status, toText(body))
	case "message/feedback-report":
		if m.feedback == "" {
			m.feedback = toText(body)
		}
	case "message/rfc822", "message/global":
		m.setReturned(body, true)
	case "text/rfc822-headers", "message/rfc822-headers", "message/global-headers":
		m.setReturned(body, false)
	default:
		if disp, _, _ := h.ContentDisposition(); disp == "attachment" && !strings.HasPrefix(mediaType, "text/") {
			return
		}
		m.addText(mediaType, body)
	}
}

// setReturned keeps the header of the first returned message, and the
// message whole when it is attached whole.
func (m *msg) setReturned(body []byte, whole bool) {
	if m.returned != nil {
		return
	}
	h, ok := readHeader(body)
	if !ok {
		return
	}
	m.returned = &h
	if whole {
		m.inner = body
	}
}

// walkMultipart reads the parts of a multipart body. It reports false when
// the body has no part at all, as broken bounces that claim to be
// multipart sometimes have.
func (m *msg) walkMultipart(body []byte, boundary string, depth int) bool {
	if boundary == "" {
		return false
	}
	if pre := preamble(body, boundary); pre != nil {
		m.addText("text/plain", pre)
	}
	mr := textproto.NewMultipartReader(bytes.NewReader(body), boundary)
	n := 0
	for m.parts <= maxParts {
		p, err := mr.NextPart()
		if err != nil {
			break
		}
		n++
		// New's only errors are an unknown charset or encoding, with
		// the part still readable as it is.
		ent, _ := message.New(message.Header{Header: p.Header}, p)
		m.walk(ent, depth+1)
	}
	return n > 0
}

// preamble returns what comes before the first boundary line when it says
// more than the usual "This is a MIME-encapsulated message": some MTAs put
// the whole explanation there.
func preamble(body []byte, boundary string) []byte {
	i := bytes.Index(body, []byte("--"+boundary))
	if i <= 0 {
		return nil
	}
	pre := bytes.TrimSpace(body[:i])
	if len(pre) < 120 {
		return nil
	}
	return pre
}

// addText keeps a part the reader can read as text.
func (m *msg) addText(mediaType string, body []byte) {
	var s string
	switch {
	case mediaType == "text/html":
		s = htmlToText(toText(body))
	case strings.HasPrefix(mediaType, "text/"), mediaType == "", strings.HasPrefix(mediaType, "multipart/"),
		mediaType == "application/octet-stream" && looksLikeText(body):
		s = toText(body)
	default:
		return
	}
	if strings.TrimSpace(s) != "" {
		m.texts = append(m.texts, s)
	}
}

// contentType parses Content-Type leniently: a broken parameter must not
// hide the boundary of a multipart.
func contentType(h message.Header) (string, map[string]string) {
	v := h.Get("Content-Type")
	if v == "" {
		return "text/plain", map[string]string{}
	}
	t, params, err := mime.ParseMediaType(v)
	if err == nil {
		return t, params
	}
	t, rest, _ := strings.Cut(v, ";")
	params = map[string]string{}
	for _, m := range paramRe.FindAllStringSubmatch(rest, -1) {
		k := strings.ToLower(m[1])
		if _, ok := params[k]; !ok {
			params[k] = strings.Trim(m[2], `"' `)
		}
	}
	return strings.ToLower(strings.TrimSpace(t)), params
}

// paramRe matches a parameter of a Content-Type that mime cannot parse.
var paramRe = regexp.MustCompile(`(?i)([a-z-]+)\s*=\s*("[^"]*"?|[^;\s]+)`)

// readHeader reads the header block at the start of b, keeping what it can
// of a broken one.
func readHeader(b []byte) (mail.Header, bool) {
	b = bytes.TrimLeft(b, "\r\n")
	h, err := textproto.ReadHeader(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		if fixed := repairHeader(b); fixed != nil {
			h, _ = textproto.ReadHeader(bufio.NewReader(bytes.NewReader(fixed)))
		}
	}
	mh := mail.Header{Header: message.Header{Header: h}}
	return mh, h.Len() > 0
}

// headerText decodes an RFC 2047 header value, falling back to the raw one.
func headerText(h message.Header, key string) string {
	s, err := h.Text(key)
	if err != nil {
		return h.Get(key)
	}
	return s
}

// toText turns a decoded body into valid UTF-8 text of bounded size.
func toText(b []byte) string {
	if len(b) > maxTextSize {
		b = b[:maxTextSize]
	}
	s := string(b)
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	return strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\r", "\n")
}

// looksLikeText tells text sent as application/octet-stream.
func looksLikeText(b []byte) bool {
	if len(b) > 512 {
		b = b[:512]
	}
	return !bytes.ContainsRune(b, 0) && utf8.Valid(b)
}
