package intake

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/emersion/go-smtp"
)

func TestScanner(t *testing.T) {
	long := strings.Repeat("a", 999)
	tests := []struct {
		name       string
		in         string
		rejectBare bool
		maxLine    int // 998 when zero
		want       string
		wantCode   smtp.EnhancedCode // zero: no error
		wantLong   bool
	}{
		{name: "crlf passes", in: "A: b\r\n\r\nbody\r\n", want: "A: b\r\n\r\nbody\r\n"},
		{name: "bare lf normalised", in: "A: b\n\nbody\n", want: "A: b\r\n\r\nbody\r\n"},
		{name: "bare cr normalised", in: "A: b\r\rbody\r\n", want: "A: b\r\n\r\nbody\r\n"},
		{name: "smuggling dot with bare lf", in: "A: b\r\n\r\nx\n.\nMAIL FROM:<e@x>\r\n", want: "A: b\r\n\r\nx\r\n.\r\nMAIL FROM:<e@x>\r\n"},
		{name: "smuggling dot with bare cr", in: "A: b\r\n\r\nx\r.\rMAIL\r\n", want: "A: b\r\n\r\nx\r\n.\r\nMAIL\r\n"},
		{name: "bare lf rejected", in: "A: b\r\n\r\nx\n.\n", rejectBare: true, wantCode: smtp.EnhancedCode{5, 6, 0}},
		{name: "bare cr rejected", in: "A: b\r\n\r\nx\r.\r\n", rejectBare: true, wantCode: smtp.EnhancedCode{5, 6, 0}},
		{name: "trailing bare cr", in: "A: b\r\n\r\nx\r", want: "A: b\r\n\r\nx\r\n"},
		{name: "nul", in: "A: b\r\n\r\nx\x00y\r\n", wantCode: smtp.EnhancedCode{5, 6, 0}},
		{name: "8bit", in: "A: b\r\n\r\ncaffè\r\n", want: "A: b\r\n\r\ncaffè\r\n"},
		{name: "header line of 998", in: "A: " + long[:995] + "\r\n\r\n", want: "A: " + long[:995] + "\r\n\r\n"},
		{name: "header line of 999", in: "A: " + long[:996] + "\r\n\r\n", wantCode: smtp.EnhancedCode{5, 6, 0}},
		{name: "header line of 999 under a higher limit", in: "A: " + long[:996] + "\r\n\r\n", maxLine: 5000, wantCode: smtp.EnhancedCode{5, 6, 0}},
		{name: "body line over the limit", in: "A: b\r\n\r\n" + long + "\r\n", wantCode: smtp.EnhancedCode{5, 6, 0}},
		{name: "body line under a lower limit", in: "A: b\r\n\r\n" + long[:101] + "\r\n", maxLine: 100, wantCode: smtp.EnhancedCode{5, 6, 0}},
		{name: "body line of 998", in: "A: b\r\n\r\n" + long[:998] + "\r\n", maxLine: 5000, want: "A: b\r\n\r\n" + long[:998] + "\r\n"},
		{name: "body line of 999 noted", in: "A: b\r\n\r\n" + long + "\r\n", maxLine: 999, want: "A: b\r\n\r\n" + long + "\r\n", wantLong: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One byte at a time, so that every state crosses a read boundary.
			maxLine := tt.maxLine
			if maxLine == 0 {
				maxLine = 998
			}
			s := newScanner(iotest.OneByteReader(strings.NewReader(tt.in)), tt.rejectBare, maxLine)
			got, err := io.ReadAll(s)
			if tt.wantCode != (smtp.EnhancedCode{}) {
				var se *Refusal
				if !errors.As(err, &se) || se.EnhancedCode != tt.wantCode {
					t.Fatalf("error %v, want an SMTP error %v", err, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if s.longLines != tt.wantLong {
				t.Errorf("longLines %v, want %v", s.longLines, tt.wantLong)
			}
		})
	}
}

func TestScannerLongBodyLineAllowed(t *testing.T) {
	in := "A: b\r\n\r\n" + strings.Repeat("x", 5000) + "\r\n"
	got, err := io.ReadAll(newScanner(strings.NewReader(in), false, 10000))
	if err != nil || string(got) != in {
		t.Fatalf("a 5000-octet body line with a 10000 limit: %v", err)
	}
}

// FuzzScanner checks what the scanner guarantees: the same outcome whatever
// the chunking of its input; on success, CRLF lines only, no NUL, no header
// line over 998 octets, no line over the limit, a last line end where the
// input had one, longLines exactly when a
// body line is over 998; and nothing but the line ends changed.
func FuzzScanner(f *testing.F) {
	for _, s := range []string{
		"A: b\r\n\r\nbody\r\n", "A: b\n\nx\n.\nMAIL FROM:<e@x>\r\n", "A: b\r\rx\r.\r", "A: b\r\n\r\nx\x00y",
		"A: b\r\n\r\ncaffè\r\n", "A: b\r\n\r\n" + strings.Repeat("x", 1500) + "\r\n", "A: " + strings.Repeat("h", 1000) + "\r\n\r\n",
	} {
		f.Add([]byte(s), uint16(7), false, uint16(1200))
	}
	f.Fuzz(func(t *testing.T, in []byte, chunk uint16, rejectBare bool, maxLine uint16) {
		limit := 78 + int(maxLine)%2000 // the configuration allows 78 up
		ref, refErr := io.ReadAll(newScanner(bytes.NewReader(in), rejectBare, limit))
		s := newScanner(&chunker{b: in, n: 1 + int(chunk)%64}, rejectBare, limit)
		got, err := io.ReadAll(s)
		if (err == nil) != (refErr == nil) || !bytes.Equal(got, ref) {
			t.Fatalf("chunks of %d: %q, %v; whole: %q, %v", 1+int(chunk)%64, got, err, ref, refErr)
		}
		if err != nil {
			if _, ok := errors.AsType[*Refusal](err); !ok {
				t.Fatalf("error %v is not a refusal", err)
			}
			return
		}
		checkScanned(t, in, got, limit, s.longLines)
	})
}

func checkScanned(t *testing.T, in, out []byte, limit int, longLines bool) {
	// go-smtp ends DATA's text with a line end; the scanner adds none.
	if len(in) > 0 && (in[len(in)-1] == '\n' || in[len(in)-1] == '\r') && !bytes.HasSuffix(out, []byte("\r\n")) {
		t.Fatalf("%q does not end with CRLF", out)
	}
	if bytes.IndexByte(out, 0) >= 0 {
		t.Fatalf("%q holds a NUL", out)
	}
	header, long := true, false
	for _, line := range bytes.Split(bytes.TrimSuffix(out, []byte("\r\n")), []byte("\r\n")) {
		if bytes.ContainsAny(line, "\r\n") {
			t.Fatalf("line %q holds a bare CR or LF", line)
		}
		if len(line) > limit || (header && len(line) > maxHeaderLine) {
			t.Fatalf("a line of %d octets passed (limit %d, in the header %v)", len(line), limit, header)
		}
		long = long || (!header && len(line) > maxHeaderLine)
		header = header && len(line) > 0
	}
	if long != longLines {
		t.Fatalf("longLines %v, want %v", longLines, long)
	}
	strip := func(b []byte) []byte {
		return bytes.ReplaceAll(bytes.ReplaceAll(b, []byte("\r"), nil), []byte("\n"), nil)
	}
	if !bytes.Equal(strip(in), strip(out)) {
		t.Fatalf("more than the line ends changed: %q became %q", in, out)
	}
}

// chunker hands out its bytes n at a time.
type chunker struct {
	b []byte
	n int
}

func (c *chunker) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[n:]
	return n, nil
}
