package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/contrib/plugins/internal/eventstest"
)

// TestDeliverWritesEvent: the command gets each event whole on its
// standard input, the details of SUPPRESSED (stream), UNSUBSCRIBED
// (unsubscribe) and BATCH-SUSPENDED (batch_suspension) included, and its
// ids and outcome in its environment.
func TestDeliverWritesEvent(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("OUT", filepath.Join(dir, "event.json"))
	r := &runner{command: `cat > "$OUT" && printf '%s %s %s' "$POSTINO_EVENT_ID" "$POSTINO_MESSAGE_ID" "$POSTINO_OUTCOME" > "$OUT.env"`,
		timeout: time.Minute}
	for _, c := range eventstest.Cases(t) {
		t.Run(c.Event.Outcome, func(t *testing.T) {
			if err := r.Deliver(context.Background(), &c.Event); err != nil {
				t.Fatal(err)
			}
			stdin, _ := os.ReadFile(filepath.Join(dir, "event.json"))
			eventstest.Check(t, "standard input", stdin, c)
			env, _ := os.ReadFile(filepath.Join(dir, "event.json.env"))
			if w := c.Event.EventID + " " + c.Event.MessageID + " " + c.Event.Outcome; string(env) != w {
				t.Errorf("environment %q, want %q", env, w)
			}
		})
	}
}

func TestConfigure(t *testing.T) {
	for _, tt := range []struct {
		name     string
		env      map[string]string
		outcomes []string
		wantErr  string
	}{
		{"outcomes in any case", map[string]string{"POSTINO_EXEC_COMMAND": "true", "POSTINO_EXEC_OUTCOMES": "suppressed, Unsubscribed,BATCH-suspended"},
			[]string{"SUPPRESSED", "UNSUBSCRIBED", "BATCH-SUSPENDED"}, ""},
		{"all outcomes", map[string]string{"POSTINO_EXEC_COMMAND": "true"}, nil, ""},
		{"no command", map[string]string{}, nil, "POSTINO_EXEC_COMMAND is not set"},
		{"bad timeout", map[string]string{"POSTINO_EXEC_COMMAND": "true", "POSTINO_EXEC_TIMEOUT": "soon"}, nil, "POSTINO_EXEC_TIMEOUT"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"POSTINO_EXEC_COMMAND", "POSTINO_EXEC_TIMEOUT", "POSTINO_EXEC_OUTCOMES"} {
				t.Setenv(k, tt.env[k])
			}
			r, err := configure()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(r.Outcomes(), tt.outcomes) {
				t.Errorf("outcomes %q, want %q", r.Outcomes(), tt.outcomes)
			}
		})
	}
}
