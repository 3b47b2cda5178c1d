package intake

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode/utf8"

	"github.com/emersion/go-smtp"
)

// checkAddress checks an envelope address beyond go-smtp's syntax check: a
// domain is required, its labels must be valid, and non-ASCII needs
// SMTPUTF8. code is the enhanced code for a syntax error (5.1.7 for the
// sender, 5.1.3 for a recipient).
func checkAddress(addr string, smtputf8 bool, code smtp.EnhancedCode) error {
	bad := func(why string) error {
		return &smtp.SMTPError{Code: 501, EnhancedCode: code, Message: fmt.Sprintf("Bad address <%s>: %s", addr, why)}
	}
	if !smtputf8 && !isASCII(addr) {
		return &smtp.SMTPError{Code: 553, EnhancedCode: smtp.EnhancedCode{5, 6, 7},
			Message: fmt.Sprintf("Address <%s> holds non-ASCII characters: MAIL FROM must say SMTPUTF8", addr)}
	}
	if !utf8.ValidString(addr) {
		return bad("not valid UTF-8")
	}
	at := strings.LastIndexByte(addr, '@')
	if at < 0 {
		return bad("a domain is required (user@example.com)")
	}
	local, domain := addr[:at], addr[at+1:]
	if local == "" || len(local) > 64 {
		return bad("the local part must be 1 to 64 octets long")
	}
	if err := checkDomain(domain); err != "" {
		return bad(err)
	}
	return nil
}

func checkDomain(d string) string {
	if d == "" {
		return "the domain is empty"
	}
	if strings.HasPrefix(d, "[") && strings.HasSuffix(d, "]") {
		lit := d[1 : len(d)-1]
		if v6, ok := strings.CutPrefix(lit, "IPv6:"); ok {
			if a, err := netip.ParseAddr(v6); err == nil && a.Is6() {
				return ""
			}
		} else if a, err := netip.ParseAddr(lit); err == nil && a.Is4() {
			return ""
		}
		return "the address literal " + d + " is not an IP address"
	}
	if len(d) > 253 {
		return "the domain is longer than 253 octets"
	}
	for _, label := range strings.Split(d, ".") {
		if label == "" || len(label) > 63 {
			return "each label of the domain must be 1 to 63 octets long"
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "a label of the domain starts or ends with '-'"
		}
		for _, r := range label {
			ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r >= 0x80
			if !ok {
				return fmt.Sprintf("the domain holds %q", r)
			}
		}
	}
	return ""
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
