// Package recode re-encodes the parts of a message that a transport cannot
// carry as they are: body lines over 998 octets (RFC 5322 section 2.1.1),
// which no upstream has to take, and 8-bit octets for an upstream without
// 8BITMIME (RFC 6152 section 3). Such a part becomes quoted-printable (a
// base64 part stays base64, its lines wrapped again); every other octet of
// the message is kept, multipart structure, preambles and message/rfc822
// parts included, so that its text after MIME decoding is the same.
//
// The work takes two passes over the message: Scan finds the parts to
// re-encode, Plan.Write writes the message with them re-encoded. Both
// stream, so that memory stays bounded whatever the size of a line or a
// part. The transfer encodings are not go-message's Entity: with
// go-message/charset linked (relay/dkim links it), an Entity's body is
// converted to UTF-8, and the part would then lie about its charset.
// Base64 is the standard library's; quoted-printable is this package's
// (qp.go), for what mime/quotedprintable cannot do: decode a line over
// 4 KiB, keep a bare CR or LF of a text as it is, and keep "--" from
// starting a line.
package recode

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"

	"github.com/emersion/go-message/textproto"
)

// MaxLine is the longest line, without its CRLF, that mail may carry.
const MaxLine = 998

// maxDepth bounds nested entities: deeper is an attack or a bug.
const maxDepth = 32

// ErrCannot is wrapped by the errors that say why a message cannot be
// re-encoded: 8-bit octets in a header (only SMTPUTF8 carries those) or
// outside any part, a part in an encoding that cannot be decoded, a
// malformed part header, too deep a nesting.
var ErrCannot = errors.New("the message cannot be re-encoded")

func cannot(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCannot, fmt.Sprintf(format, args...))
}

// Plan says which parts of a message to re-encode.
type Plan struct {
	sevenBit bool
	// leaves says, for each leaf part in the order met, whether it is
	// re-encoded.
	leaves []bool
	needed bool
}

// Needed reports whether any part is re-encoded: when not, Write copies
// the message as it is.
func (p *Plan) Needed() bool { return p.needed }

// Scan reads a message in canonical CRLF form and plans the re-encoding of
// the parts with a line over MaxLine octets and, when sevenBit is set, of
// the parts with 8-bit octets.
func Scan(r io.Reader, sevenBit bool) (*Plan, error) {
	p := &Plan{sevenBit: sevenBit}
	k := newWalker(r, p, nil)
	if _, err := k.entity(0); err != nil {
		return nil, err
	}
	return p, nil
}

// Write writes the message read from r, which must hold the bytes that
// Scan read, to w with the planned parts re-encoded.
func (p *Plan) Write(w io.Writer, r io.Reader) error {
	if !p.needed {
		_, err := io.Copy(w, r)
		return err
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	k := newWalker(r, p, bw)
	if _, err := k.entity(0); err != nil {
		return err
	}
	if k.leaf != len(p.leaves) {
		return errors.New("recode: the message changed between its scan and its writing")
	}
	return bw.Flush()
}

// Reader returns the message read from r, with the planned parts
// re-encoded, as a reader; closing it stops the writing and closes r.
func (p *Plan) Reader(r io.ReadCloser) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		err := p.Write(pw, r)
		r.Close()
		pw.CloseWithError(err)
	}()
	return pr
}

// walker goes through a message entity by entity, line by line; it writes
// to w when writing, and fills the plan when scanning (w nil).
type walker struct {
	br     *bufio.Reader
	w      *bufio.Writer
	plan   *Plan
	leaf   int      // the next leaf part's index
	bounds []string // the boundaries of the enclosing multiparts, innermost last
	bol    bool     // the next fragment starts a line
	lineAt bool     // the last fragment started a line
}

func newWalker(r io.Reader, p *Plan, w *bufio.Writer) *walker {
	return &walker{br: bufio.NewReaderSize(r, 64<<10), w: w, plan: p, bol: true}
}

// fragment reads the next piece of a line: a whole line, with its line
// end, when it fits the buffer. A CR at a piece's end stays for the next,
// so that no CRLF is split.
func (k *walker) fragment() ([]byte, error) {
	b, err := k.br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		err = nil
		if b[len(b)-1] == '\r' {
			_ = k.br.UnreadByte() // the last read was ReadSlice: it cannot fail
			b = b[:len(b)-1]
		}
	}
	k.lineAt = k.bol
	if len(b) > 0 {
		k.bol = b[len(b)-1] == '\n'
	}
	return b, err
}

// whole reports whether the last fragment, read with err, is a whole
// line: the last line of the input may lack its line end, and a
// delimiter there still counts (RFC 2046 section 5.1.1 puts no CRLF after
// the close-delimiter of the message's multipart).
func (k *walker) whole(b []byte, err error) bool {
	return k.lineAt && len(b) > 0 && (b[len(b)-1] == '\n' || err == io.EOF)
}

// delimiter tells whether line is the delimiter of an enclosing boundary:
// which one (an index in bounds) and whether it closes its multipart.
func (k *walker) delimiter(line []byte) (i int, final, ok bool) {
	if !bytes.HasPrefix(line, []byte("--")) {
		return 0, false, false
	}
	s := strings.TrimRight(string(line[2:]), " \t\r\n")
	for i := len(k.bounds) - 1; i >= 0; i-- {
		b := k.bounds[i]
		if s == b {
			return i, false, true
		}
		if s == b+"--" {
			return i, true, true
		}
	}
	return 0, false, false
}

func (k *walker) write(b []byte) error {
	if k.w == nil {
		return nil
	}
	_, err := k.w.Write(b)
	return err
}

// header reads an entity's header section, its empty line included. term
// is the delimiter that cut it short, if one did.
func (k *walker) header() (raw, term []byte, err error) {
	for {
		b, err := k.fragment()
		if len(b) == 0 && err != nil {
			if err == io.EOF {
				return raw, nil, nil
			}
			return nil, nil, err
		}
		if !k.whole(b, err) && err == nil {
			return nil, nil, cannot("a header line is longer than %d octets", k.br.Size())
		}
		if _, _, ok := k.delimiter(b); ok && k.whole(b, err) {
			return raw, bytes.Clone(b), nil
		}
		if len(bytes.TrimRight(b, "\r\n")) > MaxLine {
			return nil, nil, cannot("a header line is longer than %d octets", MaxLine)
		}
		raw = append(raw, b...)
		if bytes.Equal(b, []byte("\r\n")) || bytes.Equal(b, []byte("\n")) {
			return raw, nil, nil
		}
	}
}

// entity copies or re-encodes one entity, a message or a part, and returns
// the delimiter line that ended it (nil at the end of the input), which it
// leaves to its multipart to write.
func (k *walker) entity(depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, cannot("its MIME structure is nested deeper than %d", maxDepth)
	}
	raw, term, err := k.header()
	if err != nil {
		return nil, err
	}
	if k.plan.sevenBit && !isASCII(raw) {
		return nil, cannot("a header holds 8-bit octets, which only SMTPUTF8 carries")
	}
	if term != nil {
		// The header was cut short by a delimiter: the entity has no body.
		return term, k.write(raw)
	}
	mediaType, boundary, cte, herr := parseHeader(raw)
	identity := cte == "" || cte == "7bit" || cte == "8bit" || cte == "binary"
	switch {
	case herr == nil && identity && strings.HasPrefix(mediaType, "multipart/") && boundary != "":
		if err := k.write(k.containerHeader(raw, cte, depth)); err != nil {
			return nil, err
		}
		return k.multipart(boundary, depth)
	case herr == nil && identity && (mediaType == "message/rfc822" || mediaType == "message/global"):
		if err := k.write(k.containerHeader(raw, cte, depth)); err != nil {
			return nil, err
		}
		return k.entity(depth + 1)
	}
	return k.leafPart(raw, herr, mediaType, cte, depth)
}

// parseHeader reads what an entity's header says of its body: its media
// type (text/plain when it says none, or nothing readable), a multipart's
// boundary, and its transfer encoding.
func parseHeader(raw []byte) (mediaType, boundary, cte string, err error) {
	h, err := textproto.ReadHeader(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		return "text/plain", "", "", err
	}
	mediaType = "text/plain"
	if t, p, err := mime.ParseMediaType(h.Get("Content-Type")); err == nil {
		mediaType, boundary = t, p["boundary"]
	}
	return mediaType, boundary, strings.ToLower(strings.TrimSpace(h.Get("Content-Transfer-Encoding"))), nil
}

// containerHeader is the header of a multipart or message part: as it is,
// but for an 8bit or binary label that a 7-bit transport does not allow
// once the parts inside are 7-bit, and MIME-Version on a message whose
// parts are re-encoded.
func (k *walker) containerHeader(raw []byte, cte string, depth int) []byte {
	if k.w == nil || !k.plan.needed {
		return raw
	}
	if k.plan.sevenBit && (cte == "8bit" || cte == "binary") {
		raw = setField(raw, "Content-Transfer-Encoding", "7bit")
	}
	return mimeVersion(raw, depth)
}

// mimeVersion adds MIME-Version to the top-level header when it lacks it:
// without it, a recipient may not decode the encodings given to parts.
func mimeVersion(raw []byte, depth int) []byte {
	if depth > 0 || hasField(raw, "MIME-Version") {
		return raw
	}
	return setField(raw, "MIME-Version", "1.0")
}

// multipart copies a multipart body: its preamble, each part, its epilogue.
func (k *walker) multipart(boundary string, depth int) ([]byte, error) {
	k.bounds = append(k.bounds, boundary)
	defer func() { k.bounds = k.bounds[:len(k.bounds)-1] }()
	term, err := k.lines()
	for err == nil && term != nil {
		i, final, _ := k.delimiter(term)
		if i != len(k.bounds)-1 {
			// An enclosing multipart's delimiter: this one was never
			// closed.
			return term, nil
		}
		if err = k.write(term); err != nil {
			break
		}
		if final {
			return k.lines()
		}
		term, err = k.entity(depth + 1)
	}
	return term, err
}

// lines copies a preamble or an epilogue up to the next delimiter. They
// are not re-encoded: what they hold must already suit the transport.
func (k *walker) lines() ([]byte, error) {
	n := 0 // the current line's length so far
	for {
		b, err := k.fragment()
		if len(b) == 0 && err != nil {
			if err == io.EOF {
				return nil, nil
			}
			return nil, err
		}
		if k.whole(b, err) {
			if _, _, ok := k.delimiter(b); ok {
				return bytes.Clone(b), nil
			}
		}
		if k.lineAt {
			n = 0
		}
		n += len(bytes.TrimRight(b, "\r\n"))
		if k.w == nil && n > MaxLine {
			return nil, cannot("a line outside any MIME part is longer than %d octets", MaxLine)
		}
		if k.w == nil && k.plan.sevenBit && !isASCII(b) {
			return nil, cannot("8-bit octets outside any MIME part")
		}
		if err := k.write(b); err != nil {
			return nil, err
		}
	}
}

// leafPart copies or re-encodes a part that holds content.
func (k *walker) leafPart(raw []byte, herr error, mediaType, cte string, depth int) ([]byte, error) {
	i := k.leaf
	k.leaf++
	body := &partBody{k: k}
	if k.w == nil {
		var st stats
		if _, err := io.Copy(&st, body); err != nil {
			return nil, err
		}
		need := st.longest > MaxLine || (k.plan.sevenBit && st.eightBit)
		if need {
			if herr != nil {
				return nil, cannot("part %d needs re-encoding and its header is malformed: %v", i+1, herr)
			}
			if _, ok := encoders[cte]; !ok {
				return nil, cannot("part %d needs re-encoding and its transfer encoding %q is unknown", i+1, cte)
			}
			k.plan.needed = true
		}
		k.plan.leaves = append(k.plan.leaves, need)
		return body.term, nil
	}
	if i >= len(k.plan.leaves) {
		return nil, errors.New("recode: the message changed between its scan and its writing")
	}
	if !k.plan.leaves[i] {
		if err := k.write(raw); err != nil {
			return nil, err
		}
		if _, err := io.Copy(k.w, body); err != nil {
			return nil, err
		}
	} else if err := k.reencode(raw, mediaType, cte, depth, body, i); err != nil {
		return nil, err
	}
	// The line end before the delimiter; the delimiter is the multipart's
	// to write.
	return body.term, k.write(body.held)
}

// encoders are the transfer encodings a part is re-encoded from, with the
// one it gets.
var encoders = map[string]string{
	"": "quoted-printable", "7bit": "quoted-printable", "8bit": "quoted-printable", "binary": "quoted-printable",
	"quoted-printable": "quoted-printable", "base64": "base64",
}

// reencode writes a part with its body decoded from cte and encoded again.
func (k *walker) reencode(raw []byte, mediaType, cte string, depth int, body *partBody, i int) error {
	to := encoders[cte]
	if err := k.write(mimeVersion(setField(raw, "Content-Transfer-Encoding", to), depth)); err != nil {
		return err
	}
	out := &ioWriter{w: k.w}
	var enc io.WriteCloser
	wrap := &wrapper{w: out}
	if to == "base64" {
		enc = base64.NewEncoder(base64.StdEncoding, wrap)
	} else {
		// Line breaks are kept as such where the canonical form has
		// them.
		text := strings.HasPrefix(mediaType, "text/") || strings.HasPrefix(mediaType, "message/")
		enc = &qpEncoder{w: out, text: text}
	}
	var src io.Reader = body
	dst := io.Writer(enc)
	var qd *qpDecoder
	switch cte {
	case "quoted-printable":
		qd = &qpDecoder{w: enc}
		dst = qd
	case "base64":
		src = base64.NewDecoder(base64.StdEncoding, &spaceless{r: body})
	}
	_, err := io.Copy(dst, src)
	if err == nil && qd != nil {
		err = qd.Close()
	}
	if err != nil {
		if ioErr, ok := errors.AsType[*ioError](err); ok {
			return ioErr.err
		}
		return cannot("part %d is not valid %s: %v", i+1, cte, err)
	}
	if err := enc.Close(); err != nil {
		return err
	}
	if wrap.col > 0 && body.term == nil {
		// The message ends here: with its last line's end, as it did.
		return k.write([]byte("\r\n"))
	}
	return nil
}

// partBody reads a leaf part's body up to the delimiter that ends it. The
// line end before a delimiter belongs to the delimiter (RFC 2046 section
// 5.1.1): it is held, and given to the body only when a line follows.
type partBody struct {
	k    *walker
	rest []byte
	held []byte // the last line end read, not yet the body's
	term []byte // the delimiter that ended the body
	done bool
	buf  []byte
}

func (p *partBody) Read(b []byte) (int, error) {
	for len(p.rest) == 0 {
		if p.done {
			return 0, io.EOF
		}
		frag, err := p.k.fragment()
		if len(frag) == 0 && err != nil {
			if err != io.EOF {
				return 0, &ioError{err}
			}
			p.done = true
			p.rest, p.held = p.held, nil
			continue
		}
		if p.k.whole(frag, err) {
			if _, _, ok := p.k.delimiter(frag); ok {
				p.term, p.done = bytes.Clone(frag), true
				continue
			}
		}
		content := frag
		end := content[len(content):]
		if content[len(content)-1] == '\n' {
			cut := len(content) - 1
			if cut > 0 && content[cut-1] == '\r' {
				cut--
			}
			content, end = content[:cut], content[cut:]
		}
		p.buf = append(append(p.buf[:0], p.held...), content...)
		p.held = append(p.held[:0], end...)
		p.rest = p.buf
	}
	n := copy(b, p.rest)
	p.rest = p.rest[n:]
	return n, nil
}

// ioError marks a failure to read or write the message, as opposed to a
// part that does not decode: the one is not ErrCannot.
type ioError struct{ err error }

func (e *ioError) Error() string { return e.err.Error() }

func (e *ioError) Unwrap() error { return e.err }

// ioWriter marks the errors of w as ioError.
type ioWriter struct{ w io.Writer }

func (w *ioWriter) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	if err != nil {
		err = &ioError{err}
	}
	return n, err
}

// stats measures a part's body: its longest line and whether it holds
// 8-bit octets.
type stats struct {
	line, longest int
	eightBit      bool
}

func (s *stats) Write(b []byte) (int, error) {
	for _, c := range b {
		switch {
		case c == '\n':
			s.line = 0
			continue
		case c == '\r':
			continue
		case c >= 0x80:
			s.eightBit = true
		}
		s.line++
		s.longest = max(s.longest, s.line)
	}
	return len(b), nil
}

// spaceless drops the white space of base64 text that the decoder does not
// skip by itself.
type spaceless struct{ r io.Reader }

func (s *spaceless) Read(b []byte) (int, error) {
	n, err := s.r.Read(b)
	j := 0
	for _, c := range b[:n] {
		if c != ' ' && c != '\t' {
			b[j] = c
			j++
		}
	}
	return j, err
}

// wrapper cuts base64 text into lines of 76 characters (RFC 2045 section
// 6.8).
type wrapper struct {
	w   io.Writer
	col int
}

func (w *wrapper) Write(b []byte) (int, error) {
	n := 0
	for len(b) > 0 {
		if w.col == 76 {
			if _, err := w.w.Write([]byte("\r\n")); err != nil {
				return n, err
			}
			w.col = 0
		}
		m := min(len(b), 76-w.col)
		if _, err := w.w.Write(b[:m]); err != nil {
			return n, err
		}
		w.col += m
		n += m
		b = b[m:]
	}
	return n, nil
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// setField replaces the fields called name in the raw header section with
// one of the value given, where the first of them was (or last, when there
// was none); the other fields stay as they are.
func setField(raw []byte, name, value string) []byte {
	out := make([]byte, 0, len(raw)+len(name)+len(value)+4)
	field := []byte(name + ": " + value + "\r\n")
	placed, skipping := false, false
	for line := range bytes.Lines(raw) {
		if line[0] == ' ' || line[0] == '\t' {
			if !skipping {
				out = append(out, line...)
			}
			continue
		}
		skipping = isField(line, name)
		switch {
		case skipping && !placed:
			out, placed = append(out, field...), true
		case skipping:
		case !placed && len(bytes.TrimRight(line, "\r\n")) == 0:
			out, placed = append(append(out, field...), line...), true
		default:
			out = append(out, line...)
		}
	}
	if !placed {
		out = append(out, field...)
	}
	return out
}

// hasField reports whether the raw header section has a field called name.
func hasField(raw []byte, name string) bool {
	for line := range bytes.Lines(raw) {
		if isField(line, name) {
			return true
		}
	}
	return false
}

func isField(line []byte, name string) bool {
	k, _, ok := bytes.Cut(line, []byte(":"))
	return ok && strings.EqualFold(string(bytes.TrimRight(k, " \t")), name)
}
