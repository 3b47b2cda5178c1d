package text

import "testing"

func TestCut(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"longer text", 6, "longer"},
		{"Müller", 2, "M"}, // ü is two bytes: not split
		{"Müller", 3, "Mü"},
		{"€uro", 2, ""},
	}
	for _, tc := range tests {
		if got := Cut(tc.in, tc.n); got != tc.want {
			t.Errorf("Cut(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
