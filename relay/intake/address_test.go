package intake

import (
	"errors"
	"strings"
	"testing"

	"github.com/emersion/go-smtp"
)

func TestCheckAddress(t *testing.T) {
	rcpt := smtp.EnhancedCode{5, 1, 3}
	tests := []struct {
		addr string
		utf8 bool
		code smtp.EnhancedCode // zero: valid
	}{
		{addr: "user@example.com"},
		{addr: "user@[192.0.2.1]"},
		{addr: "user@[IPv6:2001:db8::1]"},
		{addr: "user", code: rcpt},
		{addr: "@example.com", code: rcpt},
		{addr: "user@-bad.example", code: rcpt},
		{addr: "user@exa_mple.com", code: rcpt},
		{addr: "user@[300.1.1.1]", code: rcpt},
		{addr: "user@example..com", code: rcpt},
		{addr: "josé@example.com", code: smtp.EnhancedCode{5, 6, 7}},
		{addr: "josé@exämple.com", utf8: true},
		{addr: strings.Repeat("a", 65) + "@example.com", code: rcpt},
		{addr: strings.Repeat("a", 64) + "@example.com"},
		// Non-ASCII anywhere needs SMTPUTF8, and then valid UTF-8.
		{addr: "user@exämple.com", code: smtp.EnhancedCode{5, 6, 7}},
		{addr: "user@exämple.com", utf8: true},
		{addr: "us\xffer@example.com", code: smtp.EnhancedCode{5, 6, 7}},
		{addr: "us\xffer@example.com", utf8: true, code: rcpt},
		{addr: "user@", code: rcpt},
		{addr: "user@example.com.", code: rcpt},
		// No control character anywhere, whatever the other checks say.
		{addr: "a\rb@example.com", code: rcpt},
		{addr: "us\x00er@example.net", code: rcpt},
		{addr: "user@example.net\n", code: rcpt},
		{addr: "user\t@example.net", code: rcpt},
		{addr: "user\x7f@example.net", code: rcpt},
		{addr: "user@[IPv6:fe80::1%\r]", code: rcpt},
		{addr: "josé\x00@example.com", code: rcpt},
		{addr: "josé\u0085@example.com", utf8: true, code: rcpt},
		{addr: "user@[IPv6:fe80::1%eth0]", code: rcpt},
	}
	for _, tt := range tests {
		err := checkAddress(tt.addr, tt.utf8, rcpt)
		var se *Refusal
		switch {
		case tt.code == (smtp.EnhancedCode{}) && err != nil:
			t.Errorf("%s: %v, want valid", tt.addr, err)
		case tt.code != (smtp.EnhancedCode{}) && (!errors.As(err, &se) || se.EnhancedCode != tt.code):
			t.Errorf("%s: %v, want %v", tt.addr, err, tt.code)
		}
	}
}

// TestCheckDomain checks each rule of checkDomain at its edges.
func TestCheckDomain(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	tests := []struct {
		name, domain string
		want         string // "" when valid, else a word of the reason
	}{
		{"name", "example.com", ""},
		{"one label", "localhost", ""},
		{"digits and hyphens", "0-9.x-y.example", ""},
		{"empty", "", "is empty"},
		{"empty label", "example..com", "1 to 63 octets"},
		{"leading dot", ".example.com", "1 to 63 octets"},
		{"trailing dot", "example.com.", "1 to 63 octets"},
		{"label of 63 octets", label63 + ".example", ""},
		{"label over 63 octets", label63 + "a.example", "1 to 63 octets"},
		// Octets, not characters: 62 letters and an "ä" are 64.
		{"label over 63 octets in UTF-8", strings.Repeat("a", 62) + "ä.example", "1 to 63 octets"},
		{"domain of 253 octets", label63 + "." + label63 + "." + label63 + "." + strings.Repeat("a", 61), ""},
		{"domain over 253 octets", label63 + "." + label63 + "." + label63 + "." + strings.Repeat("a", 62), "longer than 253"},
		{"leading hyphen", "-a.example", "starts or ends with '-'"},
		{"trailing hyphen", "a-.example", "starts or ends with '-'"},
		{"underscore", "exa_mple.com", `holds '_'`},
		{"space", "exa mple.com", `holds ' '`},
		{"unclosed literal", "[192.0.2.1", `holds '['`},
		// Non-ASCII passes here; checkAddress asks for SMTPUTF8.
		{"U-label", "exämple.com", ""},
		{"IPv4 literal", "[192.0.2.1]", ""},
		{"IPv4 literal out of range", "[300.1.1.1]", "not an IP address"},
		{"IPv6 literal", "[IPv6:2001:db8::1]", ""},
		{"IPv6 literal of an IPv4 address", "[IPv6:::ffff:192.0.2.1]", ""},
		{"IPv6 literal with a zone", "[IPv6:fe80::1%eth0]", "not an IP address"},
		{"IPv6 literal without its tag", "[2001:db8::1]", "not an IP address"},
		{"IPv4 address tagged IPv6", "[IPv6:192.0.2.1]", "not an IP address"},
		{"other tag", "[x-tag:content]", "not an IP address"},
		{"name in brackets", "[example.com]", "not an IP address"},
		{"empty literal", "[]", "not an IP address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := checkDomain(tt.domain)
			if tt.want == "" && got != "" || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Errorf("checkDomain(%q) = %q, want %q", tt.domain, got, tt.want)
			}
		})
	}
}
