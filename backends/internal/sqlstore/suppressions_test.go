package sqlstore

import (
	"slices"
	"strings"
	"testing"
)

func TestPieces(t *testing.T) {
	size := func(sizes ...int) func(int) int { return func(i int) int { return sizes[i] } }
	for _, c := range []struct {
		name   string
		n      int
		budget int
		size   func(int) int
		want   [][2]int
	}{
		{"none", 0, 10, size(), nil},
		{"within the budget", 3, 10, size(3, 3, 3), [][2]int{{0, 3}}},
		{"cut at the budget", 3, 6, size(3, 3, 3), [][2]int{{0, 2}, {2, 3}}},
		{"a row over the budget goes alone", 3, 5, size(2, 9, 2), [][2]int{{0, 1}, {1, 2}, {2, 3}}},
		{"cut at importRows", importRows + 1, 1 << 30, func(int) int { return 1 }, [][2]int{{0, importRows}, {importRows, importRows + 1}}},
	} {
		if got := pieces(c.n, c.budget, c.size); !slices.Equal(got, c.want) {
			t.Errorf("%s: pieces = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestFitText(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"user unknown", 20, "user unknown"},
		{"user unknown", 4, "user"},
		{"città", 4, "citt"},
		{"città", 5, "città"},
		{"a\x00b", 5, "ab"},
		{"a\xffb", 5, "a\uFFFDb"},
		{strings.Repeat("é", 10), 3, "ééé"},
	} {
		if got := fitText(c.in, c.n); got != c.want {
			t.Errorf("fitText(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

func TestLikePrefix(t *testing.T) {
	if got, want := likePrefix(`a_b%c\d`), `a\_b\%c\\d%`; got != want {
		t.Errorf("likePrefix = %q, want %q", got, want)
	}
}
