package recode

import (
	"errors"
	"fmt"
	"io"
)

// qpLine is the longest quoted-printable line, soft line break included
// (RFC 2045 section 6.7, rule 5).
const qpLine = 76

// maxSpaceRun bounds the run of white space a qpDecoder holds: it cannot
// tell, until the run ends, whether the run ends its line (and is then
// dropped) or not.
const maxSpaceRun = 64 << 10

// qpDecoder decodes the quoted-printable text written to it and writes the
// result to w. It decodes as mime/quotedprintable.Reader does, deviations
// from RFC 2045 and refusals included, so that a part says after
// re-encoding what go-message and the other Go readers made of it before;
// but it streams. Go's Reader takes a line through a 4 KiB buffer and
// refuses a longer one, while a long line, say one-line HTML labelled
// quoted-printable, is what makes a part need re-encoding. This one holds
// no line, only a run of white space not yet known to end its line.
type qpDecoder struct {
	w     io.Writer
	state int // qpText, qpEquals or qpHex
	// space is the white space since the last other octet, or since the
	// '=' in the state qpEquals.
	space    []byte
	hex      byte // the digit after '=', in the state qpHex
	inLine   bool // the line has octets before the one being read
	eqInLine bool // the line had octets before the '=' being decided
	eqBefore bool // an '=' came just before that '=', not yet written
	out      []byte
}

const (
	qpText   = iota
	qpEquals // after '=', and any white space after it
	qpHex    // after '=' and a hex digit
)

// errSpaceRun is the one refusal of a valid part: past maxSpaceRun octets
// of white space, the decoder would hold a line.
var errSpaceRun = fmt.Errorf("a line holds a run of over %d octets of white space", maxSpaceRun)

func (d *qpDecoder) Write(p []byte) (int, error) {
	d.out = d.out[:0]
	for _, c := range p {
		var err error
		switch d.state {
		case qpText:
			err = d.text(c)
		case qpEquals:
			err = d.equals(c)
		default:
			err = d.afterHex(c)
		}
		if err != nil {
			return 0, err
		}
	}
	if _, err := d.w.Write(d.out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close ends the text: white space that ends it is dropped, as it is at a
// line's end; a final '=' is a soft line break when its line holds
// something else (Go issue 15486).
func (d *qpDecoder) Close() error {
	switch d.state {
	case qpEquals:
		return d.softBreak(true)
	case qpHex:
		d.out = append(d.out[:0], '=', d.hex)
		_, err := d.w.Write(d.out)
		return err
	}
	return nil
}

func (d *qpDecoder) keepSpace(c byte) error {
	if len(d.space) == maxSpaceRun {
		return errSpaceRun
	}
	d.space = append(d.space, c)
	return nil
}

// text reads an octet outside an escape.
func (d *qpDecoder) text(c byte) error {
	switch {
	case c == ' ' || c == '\t' || c == '\r':
		d.inLine = true
		return d.keepSpace(c)
	case c == '\n':
		// The white space before a line end is dropped; the line end
		// stays, as CRLF or LF as it came.
		if n := len(d.space); n > 0 && d.space[n-1] == '\r' {
			d.out = append(d.out, '\r')
		}
		d.out = append(d.out, '\n')
		d.space, d.inLine = d.space[:0], false
		return nil
	case c == 0x7f || c < ' ':
		return fmt.Errorf("quotedprintable: invalid unescaped byte 0x%02x in body", c)
	}
	d.out = append(d.out, d.space...)
	d.space = d.space[:0]
	if c == '=' {
		d.state, d.eqInLine = qpEquals, d.inLine
	} else {
		d.out = append(d.out, c) // octets over 0x7f pass, as Go issue 22597 asks
	}
	d.inLine = true
	return nil
}

// equals reads an octet after '=' and the white space after it.
func (d *qpDecoder) equals(c byte) error {
	switch {
	case c == ' ' || c == '\t' || c == '\r':
		return d.keepSpace(c)
	case c == '\n':
		if err := d.softBreak(false); err != nil {
			return err
		}
		d.state, d.space, d.inLine = qpText, d.space[:0], false
		return nil
	}
	if d.eqBefore {
		// This '=' is no soft line break: the one before it stands.
		d.out = append(d.out, '=')
		d.eqBefore = false
	}
	switch {
	case len(d.space) > 0:
		if d.space[0] == '\r' {
			return errors.New("quotedprintable: a bare CR follows =")
		}
		// The '=' is taken as it is, and so is the white space after it
		// (Go issue 13219).
		d.out = append(append(d.out, '='), d.space...)
		d.state, d.space = qpText, d.space[:0]
		return d.text(c)
	case c == '=':
		// The first '=' is taken as it is, unless the second is a soft
		// line break: it then ends its line's text, an error.
		d.eqBefore, d.eqInLine = true, true
		return nil
	case unhex(c) >= 0:
		d.state, d.hex = qpHex, c
		return nil
	}
	d.out = append(d.out, '=')
	d.state = qpText
	return d.text(c)
}

// softBreak checks the '=' being read as a soft line break, before a line
// end or the end of the text.
func (d *qpDecoder) softBreak(atEnd bool) error {
	rest := trimSpaceTab(d.space)
	switch {
	case atEnd && (len(rest) > 0 || !d.eqInLine), !atEnd && len(rest) > 0 && string(rest) != "\r":
		return fmt.Errorf("quotedprintable: invalid bytes after =: %q", rest)
	case d.eqBefore:
		return errors.New("quotedprintable: '=' ends the text of a line")
	}
	return nil
}

// afterHex reads the octet after '=' and a hex digit.
func (d *qpDecoder) afterHex(c byte) error {
	d.state = qpText
	if lo := unhex(c); lo >= 0 {
		d.out = append(d.out, byte(unhex(d.hex)<<4|lo))
		return nil
	}
	// Not an escape: '=' and the digit are taken as they are.
	d.out = append(d.out, '=', d.hex)
	return d.text(c)
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c - 'A' + 10)
	case c >= 'a' && c <= 'f':
		return int(c - 'a' + 10)
	}
	return -1
}

func trimSpaceTab(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// qpEncoder writes what is written to it as quoted-printable text to w.
// It is not mime/quotedprintable.Writer, for two reasons.
//
// A line of its output never starts with '-': one is written "=2D". The
// text of a part cut into lines of 76 may put "--" and an enclosing
// boundary at a line's start, and readers would take that line for a
// delimiter. Escaping every leading '-' rules that out whatever the
// boundaries, with no look at them or at the content ahead: choosing
// base64 for a part that holds "--boundary" would have to decode the part
// in Scan too, and would still miss a boundary that holds "=" (the text
// "--a=b" is written "--a=3Db", the delimiter of boundary "a=3Db").
//
// In text mode, a CRLF is a line break and a bare CR or LF is escaped
// ("=0D", "=0A"), where Go's Writer makes a line break of either, which
// changes the text. Binary mode escapes every CR and LF: RFC 2045 section
// 6.7 wants no line break in the encoding of a type whose canonical form
// has none.
type qpEncoder struct {
	w     io.Writer
	text  bool
	col   int  // the length of the output line so far
	space byte // a space or tab not yet written: escaped if the line ends after it
	cr    bool // in text mode, a CR not yet written: a line break if LF follows
	out   []byte
}

func (e *qpEncoder) Write(p []byte) (int, error) {
	e.out = e.out[:0]
	for _, c := range p {
		e.put(c)
	}
	if _, err := e.w.Write(e.out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close writes what is held: trailing white space escaped, as a reader
// drops it.
func (e *qpEncoder) Close() error {
	e.out = e.out[:0]
	if e.cr {
		e.flushSpace()
		e.token('\r', true)
		e.cr = false
	} else if e.space != 0 {
		e.token(e.space, true)
		e.space = 0
	}
	_, err := e.w.Write(e.out)
	return err
}

func (e *qpEncoder) put(c byte) {
	if e.cr {
		e.cr = false
		if c == '\n' {
			if e.space != 0 {
				e.token(e.space, true)
				e.space = 0
			}
			e.out = append(e.out, "\r\n"...)
			e.col = 0
			return
		}
		e.flushSpace()
		e.token('\r', true)
	}
	if c == '\r' && e.text {
		e.cr = true // the white space before it stays held
		return
	}
	e.flushSpace()
	switch {
	case c == ' ' || c == '\t':
		e.space = c
	case c >= '!' && c <= '~' && c != '=':
		e.token(c, false)
	default:
		e.token(c, true)
	}
}

// flushSpace writes the held space or tab as it is: something follows it
// on its line.
func (e *qpEncoder) flushSpace() {
	if e.space != 0 {
		e.token(e.space, false)
		e.space = 0
	}
}

// token writes an octet, as it is or escaped, after a soft line break
// when the line has no room left for it and the '=' of a break.
func (e *qpEncoder) token(c byte, escape bool) {
	const digits = "0123456789ABCDEF"
	n := 1
	if escape {
		n = 3
	}
	if e.col+n > qpLine-1 {
		e.out = append(e.out, "=\r\n"...)
		e.col = 0
	}
	if e.col == 0 && c == '-' && !escape {
		escape, n = true, 3
	}
	if escape {
		e.out = append(e.out, '=', digits[c>>4], digits[c&15])
	} else {
		e.out = append(e.out, c)
	}
	e.col += n
}
