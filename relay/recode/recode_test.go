package recode

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/textproto"
)

func TestRecode(t *testing.T) {
	tests := []struct {
		file     string
		sevenBit bool
		needed   bool
		// changed are the parts, by media type and in order, whose
		// transfer encoding changes; the others keep their bytes.
		changed []string
	}{
		{file: "plain-8bit.eml", sevenBit: false, needed: false},
		{file: "plain-8bit.eml", sevenBit: true, needed: true, changed: []string{"text/plain"}},
		{file: "one-line-html.eml", sevenBit: false, needed: true, changed: []string{"text/html"}},
		{file: "one-line-html.eml", sevenBit: true, needed: true, changed: []string{"text/html"}},
		{file: "multipart.eml", sevenBit: false, needed: true, changed: []string{"text/html", "application/octet-stream"}},
		{file: "multipart.eml", sevenBit: true, needed: true, changed: []string{"text/plain", "text/html", "application/octet-stream", "text/plain"}},
		{file: "header-8bit.eml", sevenBit: false, needed: false},
	}
	for _, tt := range tests {
		t.Run(tt.file+map[bool]string{false: "/long-lines", true: "/7bit"}[tt.sevenBit], func(t *testing.T) {
			in := readFixture(t, tt.file)
			out := recode(t, in, tt.sevenBit)
			if !tt.needed {
				if !bytes.Equal(out, in) {
					t.Fatalf("a message that needs nothing changed:\n%s", out)
				}
				return
			}
			checkTransport(t, out, tt.sevenBit)
			before, after := walk(t, in), walk(t, out)
			if len(before) != len(after) {
				t.Fatalf("%d parts became %d", len(before), len(after))
			}
			var changed []string
			for i := range before {
				if before[i].mediaType != after[i].mediaType || before[i].decoded != after[i].decoded {
					t.Errorf("part %d (%s) differs after decoding", i+1, before[i].mediaType)
				}
				if before[i].raw != after[i].raw {
					changed = append(changed, before[i].mediaType)
				}
			}
			if strings.Join(changed, " ") != strings.Join(tt.changed, " ") {
				t.Errorf("re-encoded %v, want %v", changed, tt.changed)
			}
			if !bytes.Contains(out, []byte("\r\nMIME-Version: 1.0\r\n")) && !bytes.HasPrefix(out, []byte("MIME-Version: 1.0\r\n")) {
				t.Errorf("no MIME-Version:\n%s", out)
			}
			// What was kept stays byte for byte: the preamble and epilogue
			// of the multipart fixture.
			for _, s := range []string{"\r\nThis is a multi-part message in MIME format.\r\n", "\r\n--outer--\r\nepilogue\r\n"} {
				if bytes.Contains(in, []byte(s)) && !bytes.Contains(out, []byte(s)) {
					t.Errorf("%q lost", s)
				}
			}
			// A second pass has nothing to do.
			if again := recode(t, out, tt.sevenBit); !bytes.Equal(again, out) {
				t.Errorf("re-encoding again changed the message")
			}
		})
	}
}

func TestRecodeCannot(t *testing.T) {
	tests := []struct {
		name string
		msg  string
	}{
		{"8-bit header", string(readFixture(t, "header-8bit.eml"))},
		{"8-bit preamble", "Content-Type: multipart/mixed; boundary=b\r\n\r\ncafé\r\n--b\r\n\r\nx\r\n--b--\r\n"},
		{"unknown encoding", "Content-Transfer-Encoding: x-uuencode\r\n\r\ncafé\r\n"},
		{"bad base64", "Content-Transfer-Encoding: base64\r\n\r\n" + strings.Repeat("*", 1200) + "\r\n"},
		{"too deep", strings.Repeat("Content-Type: message/rfc822\r\n\r\n", 40) + "café\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Scan(strings.NewReader(tt.msg), true)
			if err == nil {
				err = p.Write(io.Discard, strings.NewReader(tt.msg))
			}
			if !errors.Is(err, ErrCannot) {
				t.Fatalf("error %v, want ErrCannot", err)
			}
		})
	}
}

// TestRecodeLongLineOfMegabytes streams: a line far longer than the buffer
// is re-encoded in pieces.
func TestRecodeLongLineOfMegabytes(t *testing.T) {
	body := strings.Repeat("0123456789abcdeé", 300<<10)
	in := []byte("Subject: x\r\n\r\n" + body + "\r\n")
	out := recode(t, in, true)
	checkTransport(t, out, true)
	if got := walk(t, out)[0].decoded; got != body+"\r\n" {
		t.Fatalf("the decoded body differs (%d octets, want %d)", len(got), len(body)+2)
	}
}

// TestRecodeQuotedPrintableLongLine re-encodes quoted-printable parts
// with lines longer than Go's Reader takes (4 KiB), escapes straddling
// every place where the walker or io.Copy cuts the text.
func TestRecodeQuotedPrintableLongLine(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		sevenBit bool
	}{
		{name: "one-line HTML of 5040 octets", body: strings.Repeat("<p>a=3Db</p>", 420) + "\r\n"},
		{name: "a line of 3 MB", body: strings.Repeat("<p>caf=C3=A9 =3D</p>", 3_000_000/20) + "\r\n", sevenBit: true},
		{name: "escapes shifted by 0", body: strings.Repeat("=3D", 40000) + "\r\nend=\r\n"},
		{name: "escapes shifted by 1", body: "x" + strings.Repeat("=3D", 40000) + "\r\nend=\r\n"},
		{name: "escapes shifted by 2", body: "xy" + strings.Repeat("=3D", 40000) + "\r\nend=\r\n"},
		{name: "soft breaks and spaces", body: strings.Repeat("a =\r\n", 20000) + strings.Repeat("b ", 3000) + " \r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte("Content-Type: text/html; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n" + tt.body)
			want, err := goQP([]byte(tt.body))
			if err != nil {
				t.Fatal(err)
			}
			out := recode(t, in, tt.sevenBit)
			checkTransport(t, out, tt.sevenBit)
			if got := walk(t, out)[0].decoded; got != string(want) {
				t.Fatalf("the decoded body differs (%d octets, want %d)", len(got), len(want))
			}
		})
	}
}

// TestRecodeMakesNoDelimiter: the lines of a re-encoded part are cut
// anywhere, and none may become a delimiter of an enclosing multipart.
func TestRecodeMakesNoDelimiter(t *testing.T) {
	type test struct {
		name string
		msg  string
	}
	tests := []test{{
		name: "the reviewer's",
		msg: "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=xyz\r\n\r\n--xyz\r\nContent-Type: text/plain\r\n\r\n" +
			strings.Repeat("a", 75*14) + "--xyz\r\nsecond line\r\n--xyz\r\nContent-Type: text/plain\r\n\r\nother\r\n--xyz--\r\n",
	}}
	// "--out" at every position of the first two output lines, in a part
	// inside a multipart inside the one of boundary "out"; but the first
	// (a line that starts with "--out--" ends the multipart for
	// go-message).
	for pos := 1; pos < 160; pos++ {
		for _, enc := range []string{"8bit", "quoted-printable"} {
			content := strings.Repeat("é", pos/2) + strings.Repeat("a", pos%2) + "--out--" + strings.Repeat("b", 1000)
			tests = append(tests, test{
				name: fmt.Sprintf("%s at %d", enc, pos),
				msg: "Content-Type: multipart/mixed; boundary=out\r\n\r\n--out\r\nContent-Type: multipart/alternative; boundary=in\r\n\r\n" +
					"--in\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: " + enc + "\r\n\r\n" + content + "\r\n-\r\n--in--\r\n--out--\r\n",
			})
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.msg)
			out := recode(t, in, true)
			sameText(t, in, out)
			if got, want := dashLines(out), dashLines(in); got != want {
				t.Fatalf("lines starting with --:\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// TestRecodeBareLineEnds: a bare CR or LF stays what it is after decoding,
// in text and in binary parts.
func TestRecodeBareLineEnds(t *testing.T) {
	tests := []struct {
		name string
		msg  string
	}{
		{"binary, quoted-printable", "Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nab=0Acd=0D\xc3\xa9\r\n"},
		{"binary, 8bit", "Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: 8bit\r\n\r\nab\r\ncd\xc3\xa9\r\n"},
		{"text, quoted-printable", "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nab=0Acd=0D=0D\r\n\xc3\xa9=0D\r\n"},
		{"text, 8bit", "Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\nab\ncd\r\r\n\xc3\xa9\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := []byte(tt.msg)
			out := recode(t, in, true)
			checkTransport(t, out, true)
			sameText(t, in, out)
		})
	}
}

// sameText checks that two messages have the same leaf parts after
// decoding.
func sameText(t *testing.T, in, out []byte) {
	t.Helper()
	before, after := walk(t, in), walk(t, out)
	if len(before) != len(after) {
		t.Fatalf("%d parts became %d:\n%s", len(before), len(after), out)
	}
	for i := range before {
		if before[i].decoded != after[i].decoded {
			t.Errorf("part %d differs after decoding:\n%q\n%q", i+1, before[i].decoded, after[i].decoded)
		}
	}
}

// dashLines lists the lines of a message that start with "--", in order.
func dashLines(msg []byte) string {
	var b strings.Builder
	for line := range bytes.Lines(msg) {
		if bytes.HasPrefix(line, []byte("--")) {
			b.Write(line)
		}
	}
	return b.String()
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// recode runs both passes, the second through a reader that returns a
// byte at a time, so that every state crosses a read boundary.
func recode(t *testing.T, in []byte, sevenBit bool) []byte {
	t.Helper()
	p, err := Scan(bytes.NewReader(in), sevenBit)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := p.Write(&out, iotest.OneByteReader(bytes.NewReader(in))); err != nil {
		t.Fatal(err)
	}
	r := p.Reader(io.NopCloser(bytes.NewReader(in)))
	piped, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(piped, out.Bytes()) {
		t.Fatalf("Reader gave other bytes than Write (%v)", err)
	}
	return out.Bytes()
}

// checkTransport checks what the transport needs: CRLF lines of at most
// 998 octets, and 7-bit octets when asked.
func checkTransport(t *testing.T, msg []byte, sevenBit bool) {
	t.Helper()
	for i, line := range bytes.Split(msg, []byte("\r\n")) {
		if len(line) > MaxLine {
			t.Errorf("line %d is %d octets long", i+1, len(line))
		}
		if bytes.ContainsAny(line, "\r\n") {
			t.Errorf("line %d holds a bare CR or LF", i+1)
		}
		if sevenBit && !isASCII(line) {
			t.Errorf("line %d holds 8-bit octets: %q", i+1, line)
		}
	}
}

// part is a leaf part as a reader finds it: its media type, its body as
// sent and as decoded by go-message.
type part struct {
	mediaType    string
	raw, decoded string
}

// walk lists the leaf parts of a message, message/rfc822 parts included,
// in order.
func walk(t *testing.T, msg []byte) []part {
	t.Helper()
	parts, err := leaves(msg)
	if err != nil {
		t.Fatal(err)
	}
	return parts
}

// leaves lists the leaf parts of a message as go-message reads them.
func leaves(msg []byte) ([]part, error) {
	br := bufio.NewReader(bytes.NewReader(msg))
	h, err := textproto.ReadHeader(br)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(br)
	if err != nil {
		return nil, err
	}
	mh := message.Header{Header: h}
	mediaType, params, _ := mh.ContentType()
	switch {
	case mediaType == "message/rfc822":
		return leaves(body)
	case strings.HasPrefix(mediaType, "multipart/"):
		var parts []part
		mr := textproto.NewMultipartReader(bytes.NewReader(body), params["boundary"])
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				return parts, nil
			}
			if err != nil {
				return nil, err
			}
			raw, err := io.ReadAll(p)
			if err != nil {
				return nil, err
			}
			var sub bytes.Buffer
			if err := textproto.WriteHeader(&sub, p.Header); err != nil {
				return nil, err
			}
			sub.Write(raw)
			more, err := leaves(sub.Bytes())
			if err != nil {
				return nil, err
			}
			parts = append(parts, more...)
		}
	}
	if mediaType == "" {
		mediaType = "text/plain"
	}
	e, err := message.New(mh, bytes.NewReader(body))
	if err != nil && !message.IsUnknownCharset(err) {
		return nil, err
	}
	decoded, err := io.ReadAll(e.Body)
	if err != nil {
		return nil, err
	}
	return []part{{mediaType: mediaType, raw: string(body), decoded: string(decoded)}}, nil
}

// FuzzRecode checks what a re-encoded message guarantees, whatever the
// input (in the CRLF form intake hands on): no line over 998 octets, 7-bit
// octets when asked, and nothing left to do for a second pass.
func FuzzRecode(f *testing.F) {
	for _, name := range []string{"plain-8bit.eml", "multipart.eml", "one-line-html.eml"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, true)
	}
	f.Add([]byte("Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\n\r\n"+strings.Repeat("é", 600)+"\r\n--b--\r\n"), false)
	f.Fuzz(func(t *testing.T, in []byte, sevenBit bool) {
		in = bytes.ReplaceAll(bytes.ReplaceAll(in, []byte("\r"), nil), []byte("\n"), []byte("\r\n"))
		p, err := Scan(bytes.NewReader(in), sevenBit)
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := p.Write(&out, bytes.NewReader(in)); err != nil {
			if !errors.Is(err, ErrCannot) {
				t.Fatalf("Write: %v", err)
			}
			return
		}
		// Copied as it is when nothing is needed: then the input suits.
		checkTransport(t, out.Bytes(), sevenBit)
		if !p.Needed() {
			return
		}
		again, err := Scan(bytes.NewReader(out.Bytes()), sevenBit)
		if err != nil || again.Needed() {
			t.Fatalf("a second pass: %v, needed %v", err, again != nil && again.Needed())
		}
		// No line of a re-encoded part starts with "--": every such line
		// is one of the input's.
		for line := range strings.Lines(dashLines(out.Bytes())) {
			if !strings.Contains("\n"+string(in), "\n"+line) {
				t.Fatalf("a new line starting with --: %q", line)
			}
		}
		// The text after decoding is the same, when go-message can read
		// the input (it refuses a quoted-printable line over 4 KiB).
		before, err := leaves(in)
		if err != nil {
			return
		}
		after, err := leaves(out.Bytes())
		if err != nil {
			t.Fatalf("go-message cannot read the output: %v", err)
		}
		if len(before) != len(after) {
			t.Fatalf("%d parts became %d", len(before), len(after))
		}
		for i := range before {
			if before[i].decoded != after[i].decoded {
				t.Fatalf("part %d differs after decoding:\n%q\n%q", i+1, before[i].decoded, after[i].decoded)
			}
		}
	})
}
