package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSign(t *testing.T) {
	// The value comes from Python's hmac module, as a receiver would compute it.
	got := Sign([]byte("topsecret"), "1763769600", []byte(`{"event_id":"e1"}`))
	if want := "v1=cb613b5a8b17a32d1397b658543cd4ac9eaaf8dcf5581c05430e5ae7257b334f"; got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

func TestConfigure(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secretFile, []byte("from-file\n"), 0o600)
	for _, tt := range []struct {
		name    string
		env     map[string]string
		secret  string
		wantErr string
	}{
		{"secret from a file, newline trimmed", map[string]string{"POSTINO_WEBHOOK_URL": "http://h/", "POSTINO_WEBHOOK_SECRET_FILE": secretFile}, "from-file", ""},
		{"secret from the environment", map[string]string{"POSTINO_WEBHOOK_URL": "http://h/", "POSTINO_WEBHOOK_SECRET": "s"}, "s", ""},
		{"no URL", map[string]string{"POSTINO_WEBHOOK_SECRET": "s"}, "", "POSTINO_WEBHOOK_URL is not set"},
		{"no secret", map[string]string{"POSTINO_WEBHOOK_URL": "http://h/"}, "", "no signing secret"},
		{"missing secret file", map[string]string{"POSTINO_WEBHOOK_URL": "http://h/", "POSTINO_WEBHOOK_SECRET_FILE": "/nonexistent"}, "", "POSTINO_WEBHOOK_SECRET_FILE"},
		{"bad timeout", map[string]string{"POSTINO_WEBHOOK_URL": "http://h/", "POSTINO_WEBHOOK_SECRET": "s", "POSTINO_WEBHOOK_TIMEOUT": "soon"}, "", "POSTINO_WEBHOOK_TIMEOUT"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"POSTINO_WEBHOOK_URL", "POSTINO_WEBHOOK_SECRET_FILE", "POSTINO_WEBHOOK_SECRET", "POSTINO_WEBHOOK_TIMEOUT", "POSTINO_WEBHOOK_OUTCOMES"} {
				t.Setenv(k, tt.env[k])
			}
			w, err := configure()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(w.secret) != tt.secret {
				t.Errorf("secret %q, want %q", w.secret, tt.secret)
			}
		})
	}
}
