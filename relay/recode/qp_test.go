package recode

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"mime/quotedprintable"
	"strings"
	"testing"
)

// goQP decodes as mime/quotedprintable.Reader does, through a buffer that
// holds the whole text, so that no line is too long for it: what
// qpDecoder must match.
func goQP(b []byte) ([]byte, error) {
	return io.ReadAll(quotedprintable.NewReader(bufio.NewReaderSize(bytes.NewReader(b), len(b)+16)))
}

// decodeQP decodes the text written in the pieces given.
func decodeQP(pieces ...[]byte) ([]byte, error) {
	var out bytes.Buffer
	d := &qpDecoder{w: &out}
	for _, p := range pieces {
		if _, err := d.Write(p); err != nil {
			return nil, err
		}
	}
	err := d.Close()
	return out.Bytes(), err
}

// sameAsGo checks that qpDecoder decodes in as Go's Reader does, whatever
// the point where the text is cut in two writes, and a byte at a time.
func sameAsGo(t *testing.T, in []byte) {
	t.Helper()
	want, werr := goQP(in)
	check := func(how string, got []byte, err error) {
		t.Helper()
		if (err != nil) != (werr != nil) || err == nil && !bytes.Equal(got, want) {
			t.Fatalf("%s: %q decodes to %q (%v), Go's Reader to %q (%v)", how, in, got, err, want, werr)
		}
	}
	for i := 0; i <= len(in); i++ {
		got, err := decodeQP(in[:i], in[i:])
		check(fmt.Sprintf("cut at %d", i), got, err)
	}
	pieces := make([][]byte, len(in))
	for i := range in {
		pieces[i] = in[i : i+1]
	}
	got, err := decodeQP(pieces...)
	check("a byte at a time", got, err)
}

func TestQPDecoderAsGo(t *testing.T) {
	tests := []string{
		"",
		"plain",
		"a=3Db=3db\r\nnext line\r\n",
		"caf=C3=A9 \t \r\nsoft=\r\nbreak=\nLF only\n",
		"trailing space at the end  ",
		"soft break at the end=",
		"soft break at the end=  \t",
		"=",
		" =",
		"=\r\n",
		"= \t\r\nafter a soft break with white space",
		"= \r \r\nbad soft break",
		"=\r x",
		"= \r x",
		"=4",
		"=4 ",
		"=4\r\n",
		"=4x",
		"=4=41",
		"==41",
		"=zz",
		"= x",
		"a\rb \r c\r\r\n",
		"a \r\n",
		"tab\t\r\n",
		"bare\x01control",
		"del\x7f",
		"8-bit \xc3\xa9 passes",
		"=\r",
		"a=\r",
		"line\r\n=\r\n",
		"== ",
		"a==\r\nb",
		"===41=",
		"=4=\r\n",
	}
	for _, in := range tests {
		t.Run("", func(t *testing.T) { sameAsGo(t, []byte(in)) })
	}
}

// TestQPDecoderLongLines decodes lines over Go's 4 KiB, with escapes and
// soft breaks at every position around its buffer's size.
func TestQPDecoderLongLines(t *testing.T) {
	for _, n := range []int{4093, 4094, 4095, 4096, 4097, 5000} {
		for _, tail := range []string{"=3D", "=C3=A9", "=\r\n", "  \r\n", "= \r\nx", "=\r\n-"} {
			in := []byte(strings.Repeat("x", n) + tail + strings.Repeat("y", 10))
			want, err := goQP(in)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeQP(in)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%d+%q: got %d octets (%v), want %d", n, tail, len(got), err, len(want))
			}
		}
	}
}

// TestQPDecoderSpaceRun: white space is held until the line goes on or
// ends; past maxSpaceRun it is refused rather than held.
func TestQPDecoderSpaceRun(t *testing.T) {
	in := []byte("a" + strings.Repeat(" ", maxSpaceRun) + "b\r\n")
	if got, err := decodeQP(in); err != nil || !bytes.Equal(got, in) {
		t.Fatalf("a run of %d spaces: %v", maxSpaceRun, err)
	}
	in = []byte("a" + strings.Repeat(" ", maxSpaceRun+1) + "b\r\n")
	if _, err := decodeQP(in); err == nil {
		t.Fatalf("a run of %d spaces is held", maxSpaceRun+1)
	}
}

func FuzzQPDecoder(f *testing.F) {
	f.Add([]byte("a=3Db= \r\nc=\r\n=4=\n \t=zz\r"))
	f.Fuzz(func(t *testing.T, in []byte) {
		want, werr := goQP(in)
		got, err := decodeQP(in)
		if (err != nil) != (werr != nil) || err == nil && !bytes.Equal(got, want) {
			t.Fatalf("%q decodes to %q (%v), Go's Reader to %q (%v)", in, got, err, want, werr)
		}
	})
}

// TestQPEncoder checks the encoding: Go's Reader gives back the octets
// written, lines are at most 76 long, none starts with '-', and in text
// mode a CRLF is a line break.
func TestQPEncoder(t *testing.T) {
	tests := []struct {
		name string
		in   string
		text bool
		// breaks is the number of line breaks the text keeps as such.
		breaks int
	}{
		{name: "lines", in: "one\r\ntwo\r\n", text: true, breaks: 2},
		{name: "bare LF and CR in text", in: "a\nb\rc\r\r\nd\r", text: true, breaks: 1},
		{name: "binary", in: "a\r\nb\nc\r", text: false, breaks: 0},
		{name: "trailing white space", in: "a \r\nb\t\r\nc \r\rd \t", text: true, breaks: 2},
		{name: "dashes", in: strings.Repeat("-", 300) + "\r\n--b\r\n-", text: true, breaks: 2},
		{name: "escapes", in: "=\x00\x7f\xff~!", text: true, breaks: 0},
		{name: "long", in: strings.Repeat("é ", 1000), text: false, breaks: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Written a byte at a time and all at once: the same.
			var whole, bytewise bytes.Buffer
			e := &qpEncoder{w: &whole, text: tt.text}
			if _, err := e.Write([]byte(tt.in)); err != nil {
				t.Fatal(err)
			}
			e.Close()
			e = &qpEncoder{w: &bytewise, text: tt.text}
			for i := range len(tt.in) {
				e.Write([]byte{tt.in[i]})
			}
			e.Close()
			out := whole.Bytes()
			if !bytes.Equal(out, bytewise.Bytes()) {
				t.Fatalf("byte at a time %q, whole %q", bytewise.Bytes(), out)
			}
			if got, err := goQP(out); err != nil || string(got) != tt.in {
				t.Fatalf("%q decodes to %q (%v)", out, got, err)
			}
			breaks := 0
			for line := range bytes.Lines(out) {
				line = bytes.TrimSuffix(line, []byte("\r\n"))
				if len(line) > qpLine || bytes.ContainsAny(line, "\r\n") || bytes.HasPrefix(line, []byte("-")) || !isASCII(line) {
					t.Errorf("line %q", line)
				}
				if !bytes.HasSuffix(line, []byte("=")) {
					breaks++
				}
			}
			if !bytes.HasSuffix(out, []byte("\r\n")) {
				breaks-- // the last line ends the text, not a line
			}
			if breaks != tt.breaks {
				t.Errorf("%d line breaks, want %d:\n%s", breaks, tt.breaks, out)
			}
		})
	}
}
