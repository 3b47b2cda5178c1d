package relay_test

import (
	"testing"
	"time"

	"github.com/genropy/postino/internal/testrig/logtest"
	"github.com/genropy/postino/relay/relaytest"
)

// TestHostnameWarning checks that a relay delivering straight to MX hosts
// under a name that is not fully qualified says so once at start, and one
// with a qualified name or a smarthost does not.
func TestHostnameWarning(t *testing.T) {
	const warning = `level=WARN msg="hostname is not a fully qualified domain name`
	tests := []struct {
		hostname  string
		smarthost bool
		warns     bool
	}{
		{"relay", false, true},
		{"localhost", false, true},
		{"relay", true, false},
		{"relay.example.com", false, false},
		{"relay.example.com.", false, false},
	}
	for _, tt := range tests {
		cfg, _ := testConfig(t)
		cfg.Hostname = tt.hostname
		if !tt.smarthost {
			cfg.Routes.Default.Smarthost = ""
		}
		log, buf := logtest.Logger()
		_, stop := relaytest.StartLog(t, cfg, log)
		deadline := time.Now().Add(time.Minute)
		for buf.Count("postino serving") == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the relay did not start:\n%s", buf)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		want := 0
		if tt.warns {
			want = 1
		}
		if n := buf.Count(warning); n != want {
			t.Errorf("hostname %q, smarthost %v: %d warnings, want %d:\n%s", tt.hostname, tt.smarthost, n, want, buf)
		} else if tt.warns && buf.Count("hostname="+tt.hostname) == 0 {
			t.Errorf("the warning does not name %q:\n%s", tt.hostname, buf)
		}
	}
}
