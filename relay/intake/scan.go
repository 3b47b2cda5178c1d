package intake

import (
	"fmt"
	"io"
	"strings"

	"github.com/emersion/go-smtp"
)

// maxHeaderLine is RFC 5322's limit on a line, without its CRLF.
const maxHeaderLine = 998

// scanner checks the message as it streams from the client and hands on
// canonical CRLF text: it rejects NUL octets, lines over the limits, and
// 8-bit octets the client did not announce; a bare CR or LF is turned into
// CRLF (or rejected, when so configured), so that no sequence that some
// upstream might read as the end of data survives into the spool.
type scanner struct {
	r io.Reader

	rejectBare bool
	allow8bit  bool
	maxLine    int

	inHeader bool
	line     int // 1-based number of the current line
	lineLen  int
	pendCR   bool
	eightBit bool

	in  []byte
	out []byte
	off int
	err error
}

func newScanner(r io.Reader, rejectBare, allow8bit bool, maxLine int) *scanner {
	s := &scanner{in: make([]byte, 16<<10)}
	s.reset(r, rejectBare, allow8bit, maxLine)
	return s
}

// reset readies a scanner for another message, keeping its buffers.
func (s *scanner) reset(r io.Reader, rejectBare, allow8bit bool, maxLine int) {
	*s = scanner{
		r: r, rejectBare: rejectBare, allow8bit: allow8bit, maxLine: maxLine,
		inHeader: true, line: 1,
		in: s.in, out: s.out[:0],
	}
}

func contentError(format string, args ...any) *smtp.SMTPError {
	return &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 0}, Message: oneLine(fmt.Sprintf(format, args...))}
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
			if c >= 0x80 && !s.eightBit {
				s.eightBit = true
				if !s.allow8bit {
					s.err = &smtp.SMTPError{Code: 554, EnhancedCode: smtp.EnhancedCode{5, 6, 1},
						Message: fmt.Sprintf("line %d holds 8-bit data but MAIL FROM did not say BODY=8BITMIME or SMTPUTF8", s.line)}
					return
				}
			}
			s.lineLen++
			if s.inHeader && s.lineLen > maxHeaderLine {
				s.err = contentError("header line %d is longer than %d octets; fold it", s.line, maxHeaderLine)
				return
			}
			if s.lineLen > s.maxLine {
				s.err = contentError("line %d is longer than %d octets; encode the body as quoted-printable or base64", s.line, s.maxLine)
				return
			}
			s.out = append(s.out, c)
		}
	}
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
