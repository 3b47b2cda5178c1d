package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/genropy/postino/contrib/plugins/internal/eventstest"
)

func TestSign(t *testing.T) {
	// The value comes from Python's hmac module, as a receiver would compute it.
	got := Sign([]byte("topsecret"), "1763769600", []byte(`{"event_id":"e1"}`))
	if want := "v1=cb613b5a8b17a32d1397b658543cd4ac9eaaf8dcf5581c05430e5ae7257b334f"; got != want {
		t.Errorf("Sign = %s, want %s", got, want)
	}
}

// TestDeliverPostsEvent: each event is posted whole, the details of
// SUPPRESSED (stream), UNSUBSCRIBED (unsubscribe) and BATCH-SUSPENDED
// (batch_suspension) included, signed over the body.
func TestDeliverPostsEvent(t *testing.T) {
	posted := make(chan *http.Request, 1)
	bodies := make(chan []byte, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		posted <- r
		bodies <- b
	}))
	defer srv.Close()
	w := &webhook{url: srv.URL, secret: []byte("s"), client: srv.Client()}
	for _, c := range eventstest.Cases(t) {
		t.Run(c.Event.Outcome, func(t *testing.T) {
			if err := w.Deliver(context.Background(), &c.Event); err != nil {
				t.Fatal(err)
			}
			r, body := <-posted, <-bodies
			eventstest.Check(t, "posted", body, c)
			if sig := Sign(w.secret, r.Header.Get("X-Postino-Timestamp"), body); r.Header.Get("X-Postino-Signature") != sig ||
				r.Header.Get("X-Postino-Event-Id") != c.Event.EventID {
				t.Errorf("headers %v, want the signature %s and the event id", r.Header, sig)
			}
		})
	}
}

func TestConfigure(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secretFile, []byte("from-file\n"), 0o600)
	for _, tt := range []struct {
		name     string
		env      map[string]string
		secret   string
		outcomes []string
		wantErr  string
	}{
		{"secret from a file, newline trimmed", map[string]string{"POSTINO_WEBHOOK_URL": "http://h/", "POSTINO_WEBHOOK_SECRET_FILE": secretFile}, "from-file", nil, ""},
		{"secret from the environment", map[string]string{"POSTINO_WEBHOOK_URL": "http://h/", "POSTINO_WEBHOOK_SECRET": "s"}, "s", nil, ""},
		{"outcomes in any case", map[string]string{"POSTINO_WEBHOOK_URL": "http://h/", "POSTINO_WEBHOOK_SECRET": "s",
			"POSTINO_WEBHOOK_OUTCOMES": "suppressed, Unsubscribed,BATCH-suspended"}, "s", []string{"SUPPRESSED", "UNSUBSCRIBED", "BATCH-SUSPENDED"}, ""},
		{"no URL", map[string]string{"POSTINO_WEBHOOK_SECRET": "s"}, "", nil, "POSTINO_WEBHOOK_URL is not set"},
		{"no secret", map[string]string{"POSTINO_WEBHOOK_URL": "http://h/"}, "", nil, "no signing secret"},
		{"missing secret file", map[string]string{"POSTINO_WEBHOOK_URL": "http://h/", "POSTINO_WEBHOOK_SECRET_FILE": "/nonexistent"}, "", nil, "POSTINO_WEBHOOK_SECRET_FILE"},
		{"bad timeout", map[string]string{"POSTINO_WEBHOOK_URL": "http://h/", "POSTINO_WEBHOOK_SECRET": "s", "POSTINO_WEBHOOK_TIMEOUT": "soon"}, "", nil, "POSTINO_WEBHOOK_TIMEOUT"},
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
			if !slices.Equal(w.Outcomes(), tt.outcomes) {
				t.Errorf("outcomes %q, want %q", w.Outcomes(), tt.outcomes)
			}
		})
	}
}
