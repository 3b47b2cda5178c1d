package admin

import (
	"net/http"
	"strings"
	"testing"
)

// TestProfiles: the profiles are there only when turned on, and only with
// the token.
func TestProfiles(t *testing.T) {
	for _, tt := range []struct {
		name      string
		profiling bool
		token     string
		code      int
	}{
		{"off", false, "s3cret", http.StatusNotFound},
		{"on, no token", true, "", http.StatusUnauthorized},
		{"on, wrong token", true, "guess", http.StatusUnauthorized},
		{"on, with the token", true, "s3cret", http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHandler(newStore(t), Options{Token: "s3cret", Profiling: tt.profiling})
			w := serve(h, "GET", "relay.internal:8525", "/debug/pprof/goroutine?debug=1", tt.token)
			if w.Code != tt.code {
				t.Fatalf("%d %s, want %d", w.Code, w.Body, tt.code)
			}
			if tt.code == http.StatusOK && !strings.Contains(w.Body.String(), "goroutine profile:") {
				t.Errorf("not a goroutine profile: %.200s", w.Body)
			}
		})
	}
}
