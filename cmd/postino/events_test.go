package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
	"github.com/genropy/postino/relay/relaytest"
)

// TestEventsListFailing checks that events list shows, by default, the
// events the plugins refused, with their tries: parked ones, and pending
// ones waiting for their next try.
func TestEventsListFailing(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the test plugin")
	}
	plugin := buildTestPlugin(t)
	gate := filepath.Join(t.TempDir(), "gate")
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	up := smtptest.Start(t, smtptest.Options{})
	cfg := relay.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.SMTP.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Routes.Default.Smarthost = up.Addr
	cfg.Intake.Poll, cfg.Delivery.Poll = relay.Duration(50*time.Millisecond), relay.Duration(50*time.Millisecond)
	env := map[string]string{"TESTPLUGIN_MODE": "fail-while", "TESTPLUGIN_GATE": gate, "TESTPLUGIN_OUT": plugin.Out, "TESTPLUGIN_STATE": plugin.State}
	// One plugin tries SENT again in an hour; the other parks FAILED at
	// its first failure.
	retrying := relay.DefaultPlugin(plugin.Path)
	retrying.Name, retrying.Env, retrying.Outcomes = "retrying", env, []string{"SENT"}
	retrying.Retry = relay.PluginRetryConfig{First: relay.Duration(time.Hour), Max: relay.Duration(time.Hour)}
	parking := relay.DefaultPlugin(plugin.Path)
	parking.Name, parking.Env, parking.Outcomes, parking.MaxAttempts = "parking", env, []string{"FAILED"}, 1
	cfg.Plugins = []relay.PluginConfig{retrying, parking}
	r, _ := relaytest.Start(t, cfg)
	adminAddr := r.AdminAddr().String()

	sendOne(t, r.SMTPAddr().String(), "X-Genro-Mail-ID: ev-sent\r\n")
	sendOne(t, r.SMTPAddr().String(), "X-Genro-Mail-ID: ev-failed\r\nX-Postino-Send-After: "+time.Now().Add(time.Hour).UTC().Format(time.RFC3339)+"\r\n")
	for deadline := time.Now().Add(60 * time.Second); ; {
		// Cancelled once intake has made it READY.
		if _, _, code := cli(t, "queue", "cancel", "ev-failed", "--admin", adminAddr); code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ev-failed could not be cancelled")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var list admin.EventList
	for deadline := time.Now().Add(60 * time.Second); ; {
		cliJSON(t, &list, "events", "list", "--json", "--admin", adminAddr)
		if len(list.Events) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("failing events: %+v", list.Events)
		}
		time.Sleep(50 * time.Millisecond)
	}
	out, errOut, code := cli(t, "events", "list", "--admin", adminAddr)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "EVENT MESSAGE OUTCOME STATE TRIES LAST ERROR" {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	// Parked first: they wait for an operator.
	for i, want := range []string{"ev-failed FAILED parked 1 plugin parking:", "ev-sent SENT pending 1 plugin retrying:"} {
		if row := strings.Join(strings.Fields(lines[i+1]), " "); !strings.Contains(row, want) {
			t.Errorf("row %d %q, want %q", i+1, row, want)
		}
	}
	// The other states are still there to ask for.
	if out, _, code := cli(t, "events", "list", "--state", "pending", "--admin", adminAddr); code != 0 || !strings.Contains(out, "ev-sent") || strings.Contains(out, "ev-failed") {
		t.Errorf("--state pending: exit %d:\n%s", code, out)
	}
}
