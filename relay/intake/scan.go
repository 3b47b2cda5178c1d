package intake

import (
	"io"
	"strings"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/relay/recode"
)

// maxHeaderLine is RFC 5322's limit on a line, without its CRLF.
const maxHeaderLine = recode.MaxLine

// scanner checks the message as it streams from the client and hands on
// canonical CRLF text. What it hands on has no NUL octet, no CR or LF
// outside a CRLF pair, no header line over 998 octets and no body line over
// maxLine; it refuses a message that would need otherwise (a bare CR or LF
// is turned into CRLF, unless rejectBare), so that no sequence that some
// upstream might read as the end of data survives into the spool. It
// notes, without refusing them, 8-bit octets (apps send them without
// BODY=8BITMIME, and Postfix takes them) and body lines over 998 octets,
// whose parts intake then re-encodes (relay/recode).
type scanner struct {
	r io.Reader

	rejectBare bool
	maxLine    int
	// checkAt is the line length from which each octet is checked: the
	// lower of maxLine and 998.
	checkAt int

	inHeader bool
	line     int // 1-based number of the current line
	lineLen  int
	pendCR   bool
	eightBit bool
	// longLines says a body line is over 998 octets.
	longLines bool

	in  []byte
	out []byte
	off int
	err error
}

func newScanner(r io.Reader, rejectBare bool, maxLine int) *scanner {
	s := &scanner{in: make([]byte, 16<<10)}
	s.reset(r, rejectBare, maxLine)
	return s
}

// reset readies a scanner for another message, keeping its buffers.
func (s *scanner) reset(r io.Reader, rejectBare bool, maxLine int) {
	*s = scanner{
		r: r, rejectBare: rejectBare, maxLine: maxLine, checkAt: min(maxLine, maxHeaderLine),
		inHeader: true, line: 1,
		in: s.in, out: s.out[:0],
	}
}

func contentError(format string, args ...any) *Refusal {
	return refusal(554, smtp.EnhancedCode{5, 6, 0}, format, args...)
}

// oneLine keeps text quoted from a message (a malformed header line, say)
// from breaking the reply into several.
func oneLine(s string) string {
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s))
}

func (s *scanner) Read(p []byte) (int, error) {
	for s.off == len(s.out) {
		if s.err != nil {
			return 0, s.err
		}
		s.out, s.off = s.out[:0], 0
		n, err := s.r.Read(s.in)
		s.process(s.in[:n])
		if err != nil && s.err == nil {
			if err == io.EOF && s.pendCR {
				s.bare("CR")
			}
			if s.err == nil {
				s.err = err
			}
		}
	}
	n := copy(p, s.out[s.off:])
	s.off += n
	return n, nil
}

func (s *scanner) process(b []byte) {
	for _, c := range b {
		if s.err != nil {
			return
		}
		if s.pendCR {
			s.pendCR = false
			if c == '\n' {
				s.endLine()
				continue
			}
			if !s.bare("CR") {
				return
			}
		}
		switch {
		case c == '\r':
			s.pendCR = true
		case c == '\n':
			s.bare("LF")
		case c == 0:
			s.err = contentError("line %d holds a NUL octet, which mail may not carry; encode binary content as base64", s.line)
		default:
			if c >= 0x80 {
				s.eightBit = true
			}
			s.lineLen++
			if s.lineLen > s.checkAt && !s.long() {
				return
			}
			s.out = append(s.out, c)
		}
	}
}

// long checks a line that has grown over checkAt octets.
func (s *scanner) long() bool {
	switch {
	case s.lineLen > s.maxLine:
		s.err = contentError("line %d is longer than %d octets; encode the body as quoted-printable or base64", s.line, s.maxLine)
	case s.inHeader && s.lineLen > maxHeaderLine:
		s.err = contentError("header line %d is longer than %d octets; fold it", s.line, maxHeaderLine)
	case s.lineLen > maxHeaderLine:
		s.longLines = true
	}
	return s.err == nil
}

// bare handles a CR or LF that is not part of a CRLF pair.
func (s *scanner) bare(what string) bool {
	if s.rejectBare {
		s.err = contentError("line %d ends with a bare %s; lines must end with CRLF", s.line, what)
		return false
	}
	s.endLine()
	return true
}

func (s *scanner) endLine() {
	if s.inHeader && s.lineLen == 0 {
		s.inHeader = false
	}
	s.out = append(s.out, '\r', '\n')
	s.line++
	s.lineLen = 0
}
