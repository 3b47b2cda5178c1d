package intake

import (
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
		allow8bit  bool
		want       string
		wantCode   smtp.EnhancedCode // zero: no error
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
		{name: "8bit without 8bitmime", in: "A: b\r\n\r\ncaffè\r\n", wantCode: smtp.EnhancedCode{5, 6, 1}},
		{name: "8bit with 8bitmime", in: "A: b\r\n\r\ncaffè\r\n", allow8bit: true, want: "A: b\r\n\r\ncaffè\r\n"},
		{name: "header line of 998", in: "A: " + long[:995] + "\r\n\r\n", want: "A: " + long[:995] + "\r\n\r\n"},
		{name: "header line of 999", in: "A: " + long[:996] + "\r\n\r\n", wantCode: smtp.EnhancedCode{5, 6, 0}},
		{name: "body line over the limit", in: "A: b\r\n\r\n" + long + "\r\n", wantCode: smtp.EnhancedCode{5, 6, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One byte at a time, so that every state crosses a read boundary.
			s := newScanner(iotest.OneByteReader(strings.NewReader(tt.in)), tt.rejectBare, tt.allow8bit, 998)
			got, err := io.ReadAll(s)
			if tt.wantCode != (smtp.EnhancedCode{}) {
				var se *smtp.SMTPError
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
		})
	}
}

func TestScannerLongBodyLineAllowed(t *testing.T) {
	in := "A: b\r\n\r\n" + strings.Repeat("x", 5000) + "\r\n"
	got, err := io.ReadAll(newScanner(strings.NewReader(in), false, false, 10000))
	if err != nil || string(got) != in {
		t.Fatalf("a 5000-octet body line with a 10000 limit: %v", err)
	}
}
