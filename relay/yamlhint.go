package relay

import (
	"fmt"
	"strconv"
	"strings"
)

// indentHint looks for what YAML syntax errors most often come from: a tab
// in a line's indentation, a line indented to none of the columns of the
// lines above it, a line indented deeper than a key that has its value
// already, a key without its colon. The YAML reader often names the line
// where the mapping at fault began, so the search starts at the line before
// the one it names (line) and goes on from there. indentHint returns the
// line at fault and what is wrong with it, or 0.
func indentHint(text string, line int) (int, string) {
	s := indentScan{block: -1}
	for i, l := range strings.Split(text, "\n") {
		if hint := s.next(i+1, l); hint != "" && i+1 >= line-1 {
			return i + 1, hint
		}
	}
	if s.flow > 0 {
		return s.flowLine, "this line opens a [ or { that is never closed"
	}
	return 0, ""
}

// indentScan follows the block structure of a YAML text line by line, as
// far as its indentation shows it.
type indentScan struct {
	// levels are the columns of the keys and list items above, that a
	// line may come back to.
	levels []int
	// open: the last line was a key without a value (or a bare "-"), so
	// the next one may go deeper.
	open bool
	// last is the number of the last line read.
	last int
	// block is the column of the key of the block scalar (| or >) being
	// read, or -1.
	block int
	// flow is how many brackets ([ or {) are open, since flowLine.
	flow, flowLine int
}

// next reads line n, l, and says what is wrong with it, if anything.
func (s *indentScan) next(n int, l string) string {
	body := strings.TrimLeft(l, " \t")
	if body == "" || body[0] == '#' {
		return ""
	}
	indent := l[:len(l)-len(body)]
	col := len(indent)
	if s.block >= 0 && col > s.block {
		return ""
	}
	s.block = -1
	if s.flow > 0 {
		s.flow += flowDepth(body)
		return ""
	}
	if strings.Contains(indent, "\t") {
		s.last = n
		return "a tab indents this line, and YAML indents with spaces only"
	}
	if body == "---" || body == "..." {
		s.levels, s.open = nil, true
		return ""
	}
	hint := s.place(col)
	if h := s.content(n, col, body); hint == "" {
		hint = h
	}
	s.last = n
	return hint
}

// place checks that a line at column col is where the lines above let it
// be, and makes it a level.
func (s *indentScan) place(col int) string {
	if len(s.levels) == 0 || col > s.levels[len(s.levels)-1] {
		deeper := len(s.levels) > 0 && !s.open
		s.levels = append(s.levels, col)
		if deeper {
			return fmt.Sprintf("this line is indented deeper than line %d, whose key has its value already: "+
				"indent it as line %d, or leave line %d's value out to make it a section", s.last, s.last, s.last)
		}
		return ""
	}
	columns := columnList(s.levels)
	for len(s.levels) > 0 && s.levels[len(s.levels)-1] > col {
		s.levels = s.levels[:len(s.levels)-1]
	}
	if len(s.levels) > 0 && s.levels[len(s.levels)-1] == col {
		return ""
	}
	s.levels = append(s.levels, col)
	return fmt.Sprintf("this line is indented by %s, and the lines above it by %s: "+
		"the keys of one section start in one column", spaces(col), columns)
}

// content reads what line n, at column col, holds, body: a list item, a key
// with or without its value, the start of a block scalar or of a flow
// collection.
func (s *indentScan) content(n, col int, body string) string {
	rest := uncomment(body)
	item := rest == "-" || strings.HasPrefix(rest, "- ")
	if item {
		inner := strings.TrimLeft(rest[1:], " ")
		if inner == "" {
			s.open = true
			return ""
		}
		// The item's own keys start where its text does.
		col += len(rest) - len(inner)
		s.levels = append(s.levels, col)
		rest = inner
	}
	value, isKey := keyValue(rest)
	if !isKey {
		value = rest
	}
	value = untagged(value)
	s.open = isKey && value == ""
	switch {
	case strings.HasPrefix(value, "|") || strings.HasPrefix(value, ">"):
		s.block = col
	case strings.HasPrefix(value, "[") || strings.HasPrefix(value, "{"):
		s.flow, s.flowLine = max(0, flowDepth(value)), n
	}
	if !isKey && !item && len(s.levels) > 1 {
		return "this line has no colon after its key: a setting is written key: value"
	}
	return ""
}

// keyValue splits "key: value" (or "key:") and returns the value, and
// whether the text is a key at all.
func keyValue(text string) (string, bool) {
	if strings.HasPrefix(text, `"`) || strings.HasPrefix(text, "'") {
		end := strings.IndexByte(text[1:], text[0])
		if end < 0 {
			return "", false
		}
		text = text[end+2:]
		if text == ":" || strings.HasPrefix(text, ": ") {
			return strings.TrimSpace(text[1:]), true
		}
		return "", false
	}
	if strings.HasSuffix(text, ":") && !strings.Contains(text, ": ") {
		return "", true
	}
	_, value, ok := strings.Cut(text, ": ")
	return strings.TrimSpace(value), ok
}

// untagged is a value without the anchor (&name) or tag (!!str) before
// it: "key: &defaults" opens a section as "key:" does.
func untagged(value string) string {
	for strings.HasPrefix(value, "&") || strings.HasPrefix(value, "!") {
		_, value, _ = strings.Cut(value, " ")
		value = strings.TrimSpace(value)
	}
	return value
}

// uncomment is text without its comment, outside quotes.
func uncomment(text string) string {
	var quote byte
	for i := 0; i < len(text); i++ {
		switch c := text[i]; {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#' && (i == 0 || text[i-1] == ' '):
			return strings.TrimSpace(text[:i])
		}
	}
	return strings.TrimSpace(text)
}

// flowDepth is how many more brackets text opens than it closes, outside
// quotes and its comment.
func flowDepth(text string) int {
	depth := 0
	var quote byte
	for _, c := range []byte(uncomment(text)) {
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '[' || c == '{':
			depth++
		case c == ']' || c == '}':
			depth--
		}
	}
	return depth
}

// columnList names the indentations of levels: "0, 2 or 4 spaces".
func columnList(levels []int) string {
	words := make([]string, len(levels))
	for i, l := range levels {
		words[i] = strconv.Itoa(l)
	}
	if len(words) == 1 {
		return spaces(levels[0])
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1] + " spaces"
}

func spaces(n int) string {
	if n == 1 {
		return "1 space"
	}
	return strconv.Itoa(n) + " spaces"
}
