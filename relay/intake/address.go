package intake

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/emersion/go-smtp"
)

// checkAddress checks an envelope address beyond go-smtp's syntax check: no
// control character, a domain is required, its labels must be valid, and
// non-ASCII needs SMTPUTF8. code is the enhanced code for a syntax error
// (5.1.7 for the sender, 5.1.3 for a recipient).
func checkAddress(addr string, smtputf8 bool, code smtp.EnhancedCode) error {
	// go-smtp passes on whatever octets sit between the brackets (and
	// unquotes a quoted local part): a NUL or a bare CR would reach the
	// spool, and an upstream's command line, where a CR can end the line.
	// The reply does not repeat the address, which would carry them back.
	if i := strings.IndexFunc(addr, unicode.IsControl); i >= 0 {
		r, _ := utf8.DecodeRuneInString(addr[i:])
		return refusal(501, code, "Bad address: it holds the control character U+%04X at octet %d; no address may hold one", r, i)
	}
	bad := func(why string) error {
		return refusal(501, code, "Bad address <%s>: %s", addr, why)
	}
	if !smtputf8 && !isASCII(addr) {
		return refusal(553, smtp.EnhancedCode{5, 6, 7}, "Address <%s> holds non-ASCII characters: MAIL FROM must say SMTPUTF8", addr)
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

// checkDomain says what is wrong with the domain of an envelope address,
// or "" when nothing is. It is an address literal, or a name of labels
// and at most 253 octets: the most a name can have in the DNS, whose 255
// octets (RFC 1035 section 2.3.4) count a length octet before the first
// label and the root's after the last.
func checkDomain(d string) string {
	switch {
	case d == "":
		return "the domain is empty"
	case strings.HasPrefix(d, "[") && strings.HasSuffix(d, "]"):
		return checkAddressLiteral(d)
	case len(d) > 253:
		return "the domain is longer than 253 octets"
	}
	for _, label := range strings.Split(d, ".") {
		if why := checkLabel(label); why != "" {
			return why
		}
	}
	return ""
}

// checkAddressLiteral checks a domain in brackets: an IPv4 address, or an
// IPv6 one tagged "IPv6:" (RFC 5321 section 4.1.3). A literal of any
// other tag is refused, and so is an IPv6 zone ("%eth0"), which names an
// interface of one machine and any text after it.
func checkAddressLiteral(d string) string {
	lit := d[1 : len(d)-1]
	if v6, ok := strings.CutPrefix(lit, "IPv6:"); ok {
		if a, err := netip.ParseAddr(v6); err == nil && a.Is6() && a.Zone() == "" {
			return ""
		}
	} else if a, err := netip.ParseAddr(lit); err == nil && a.Is4() {
		return ""
	}
	return "the address literal " + d + " is not an IP address"
}

// checkLabel checks one label of a domain name: 1 to 63 octets (RFC 1035
// section 2.3.4) of letters, digits and hyphens, with no hyphen at either
// end (RFC 5321 section 4.1.2). Non-ASCII characters pass unchecked: the
// U-labels of an internationalised name (RFC 5890) are not validated
// here, and whether the address may hold them at all is SMTPUTF8's
// matter, checked by checkAddress.
func checkLabel(label string) string {
	if label == "" || len(label) > 63 {
		return "each label of the domain must be 1 to 63 octets long"
	}
	if label[0] == '-' || label[len(label)-1] == '-' {
		return "a label of the domain starts or ends with '-'"
	}
	for _, r := range label {
		if !letDigHyp(r) && r < 0x80 {
			return fmt.Sprintf("the domain holds %q", r)
		}
	}
	return ""
}

// letDigHyp reports whether r is an ASCII letter, digit or hyphen.
func letDigHyp(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-'
}

// isASCII reports whether s holds no octet above 127; it takes the bytes
// read as they are, without a string copy of each buffer.
func isASCII[T string | []byte](s T) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// ASCIIAddresses reports whether the sender and every recipient are plain
// ASCII, so that none of them needs SMTPUTF8.
func ASCIIAddresses(from string, rcpts []string) bool {
	if !isASCII(from) {
		return false
	}
	for _, r := range rcpts {
		if !isASCII(r) {
			return false
		}
	}
	return true
}
