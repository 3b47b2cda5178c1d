package bounce

import (
	"regexp"
	"strconv"
	"strings"
)

// statusRe finds enhanced status codes (RFC 3463); replyRe finds an SMTP
// reply code followed by one, the form real replies take ("550 5.1.1",
// "550-5.7.26", "554 554 5.7.1", "(#5.1.1)" after qmail's text). Boundaries
// are checked by hand: Go's regexp has no look-around, and "192.0.2.153"
// must not read as 2.153.
var (
	statusRe = regexp.MustCompile(`[245]\.\d{1,3}\.\d{1,3}`)
	replyRe  = regexp.MustCompile(`\b([245][0-5]\d)(?:[ -]+[245][0-5]\d)?[ -]+['"#]?([245]\.\d{1,3}\.\d{1,3})`)
	codeRe   = regexp.MustCompile(`\b[245][0-5]\d\b`)
)

// findStatus returns the first enhanced status code of s.
func findStatus(s string) string {
	ok := ""
	for _, loc := range statusRe.FindAllStringIndex(s, -1) {
		if codeBoundary(s, loc[0], loc[1]) {
			if s[loc[0]] != '2' {
				return s[loc[0]:loc[1]]
			}
			if ok == "" {
				ok = s[loc[0]:loc[1]]
			}
		}
	}
	return ok
}

// codeBoundary reports whether s[i:j] stands alone: not part of an IP
// address, a version number or a longer number.
func codeBoundary(s string, i, j int) bool {
	if i > 0 && (s[i-1] == '.' || isAlnum(s[i-1])) {
		return false
	}
	if j < len(s) {
		if isAlnum(s[j]) {
			return false
		}
		if s[j] == '.' && j+1 < len(s) && s[j+1] >= '0' && s[j+1] <= '9' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// replyCodes returns the SMTP reply code and enhanced status code of a
// diagnostic: the pair of the first failure reply that has both, else the
// first of each found on its own. Success replies in a transcript ("250
// 2.1.5 Ok") count only when there is no failure.
func replyCodes(s string) (code int, status string) {
	var okCode int
	var okStatus string
	for _, m := range replyRe.FindAllStringSubmatchIndex(s, -1) {
		if !codeBoundary(s, m[4], m[5]) || !codeBoundary(s, m[2], m[3]) {
			continue
		}
		c, _ := strconv.Atoi(s[m[2]:m[3]])
		if s[m[4]] == '2' {
			if okCode == 0 {
				okCode, okStatus = c, s[m[4]:m[5]]
			}
			continue
		}
		return c, s[m[4]:m[5]]
	}
	code, status = findReplyCode(s), findStatus(s)
	if code == 0 && status == "" {
		return okCode, okStatus
	}
	return code, status
}

// findReplyCode returns the first failure reply code of s standing where
// SMTP replies put it: at the start of a line, or after "said:",
// "reason:", "host [ip]:" and the like; never inside an address, a date or
// an IP address. A success code is returned only when there is no failure.
func findReplyCode(s string) int {
	ok := 0
	for _, loc := range codeRe.FindAllStringIndex(s, -1) {
		i, j := loc[0], loc[1]
		if !codeBoundary(s, i, j) {
			continue
		}
		if j < len(s) && !strings.ContainsRune(" -\t\n]),;:", rune(s[j])) {
			continue
		}
		if i > 0 && !strings.ContainsRune(" \t\n:([<\"'#=", rune(s[i-1])) {
			continue
		}
		if i > 1 && s[i-1] == ':' && isAlnum(s[i-2]) {
			continue // an IPv6 address or a time
		}
		if i > 0 && !replyLead(s[:i]) {
			continue
		}
		n, _ := strconv.Atoi(s[i:j])
		if n >= 400 {
			return n
		}
		if ok == 0 {
			ok = n
		}
	}
	return ok
}

// replyLeadRe matches what comes right before a reply code standing on
// its own: the start of a line, or the words MTAs introduce replies with.
var replyLeadRe = regexp.MustCompile(`(?i)(?:(?:^|\n)[ \t>*-]*|(?:said|was|with|reply|response|responsecode|error|error_code|code|smtp|failed|returned|reason|status|answer|deferred|message|\]|<<<|>>>)\s*:?\s*)$`)

// replyLead reports whether before ends where a reply code may start.
func replyLead(before string) bool {
	if len(before) > 40 {
		// Keep the start of the cut from passing for the start of a line.
		before = "x" + before[len(before)-40:]
	}
	return replyLeadRe.MatchString(before)
}

// addrRe finds mail addresses in free text.
var addrRe = regexp.MustCompile(addrPattern)

// findAddress returns the first address of s.
func findAddress(s string) string {
	return cleanAddress(addrRe.FindString(s))
}

// cleanAddress trims what free text leaves around an address: sentence
// dots, quotes, and the "=" of quoted-printable soft breaks.
func cleanAddress(a string) string {
	return strings.Trim(a, ".'\"=-")
}

// smtpPrefixRe matches the code prefix of a continued SMTP reply line,
// "550-5.7.1 " or "550 ".
var smtpPrefixRe = regexp.MustCompile(`^([245]\d\d)[ -](?:#?[245]\.\d{1,3}\.\d{1,3}\s+)?`)

// joinDiagnostic joins the lines of a diagnostic into one, dropping the
// code prefixes a multi-line SMTP reply repeats on each line.
func joinDiagnostic(lines []string) string {
	var b strings.Builder
	prefix := ""
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if m := smtpPrefixRe.FindString(l); m != "" {
			code := m[:3]
			if prefix == code {
				l = strings.TrimSpace(l[len(m):])
			}
			prefix = code
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(l)
	}
	return strings.Join(strings.Fields(b.String()), " ")
}
