package bounce

import (
	"html"
	"regexp"
	"strings"
)

// What htmlToText removes or turns into line breaks.
var (
	htmlDropRe  = regexp.MustCompile(`(?is)<(?:script|style|head)\b.*?</(?:script|style|head)\s*>`)
	htmlBreakRe = regexp.MustCompile(`(?i)<(?:br|/p|/div|/tr|/li|/h[1-6]|/table|p|div|tr|li)\b[^>]*>`)
	htmlTagRe   = regexp.MustCompile(`(?s)<[^>]*>`)
	blankRunRe  = regexp.MustCompile(`\n[ \t]*\n(?:[ \t]*\n)+`)
)

// htmlToText reduces an HTML part to its text, one line per block, which
// is all the bounce reader needs of it.
func htmlToText(s string) string {
	s = htmlDropRe.ReplaceAllString(s, "")
	s = strings.ReplaceAll(s, "\n", " ")
	s = htmlBreakRe.ReplaceAllString(s, "\n")
	s = htmlTagRe.ReplaceAllString(s, "")
	s = html.UnescapeString(s)
	s = strings.ReplaceAll(s, "\u00a0", " ")
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return blankRunRe.ReplaceAllString(strings.Join(lines, "\n"), "\n\n")
}
