package recode

import (
	"bufio"
	"bytes"
	"errors"
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
	br := bufio.NewReader(bytes.NewReader(msg))
	h, err := textproto.ReadHeader(br)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(br)
	if err != nil {
		t.Fatal(err)
	}
	mh := message.Header{Header: h}
	mediaType, params, _ := mh.ContentType()
	switch {
	case mediaType == "message/rfc822":
		return walk(t, body)
	case strings.HasPrefix(mediaType, "multipart/"):
		var parts []part
		mr := textproto.NewMultipartReader(bytes.NewReader(body), params["boundary"])
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				return parts
			}
			if err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(p)
			if err != nil {
				t.Fatal(err)
			}
			var sub bytes.Buffer
			if err := textproto.WriteHeader(&sub, p.Header); err != nil {
				t.Fatal(err)
			}
			sub.Write(raw)
			parts = append(parts, walk(t, sub.Bytes())...)
		}
	}
	if mediaType == "" {
		mediaType = "text/plain"
	}
	e, err := message.New(mh, bytes.NewReader(body))
	if err != nil && !message.IsUnknownCharset(err) {
		t.Fatal(err)
	}
	decoded, err := io.ReadAll(e.Body)
	if err != nil {
		t.Fatal(err)
	}
	return []part{{mediaType: mediaType, raw: string(body), decoded: string(decoded)}}
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
	})
}
