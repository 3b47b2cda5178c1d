// Package text holds what the relay does alike to text from outside.
package text

import "unicode/utf8"

// Cut returns at most n bytes of s, never ending inside a UTF-8 sequence:
// a reply, a diagnostic or a name kept for reading, bounded.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
