package plugins_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/plugins"
	"github.com/genropy/postino/plugins/sdk"
)

// TestPluginStartFailure: a plugin that does not start is reported, with
// what to do, and its events wait for it while the dispatcher goes on.
func TestPluginStartFailure(t *testing.T) {
	gate := closedGate(t)
	for _, tt := range []struct {
		name string
		mode string
		path string
		// key is the plugin's in Ready: its name, by default its file's.
		key  string
		want []string
	}{
		{"missing binary", "ok", "/nonexistent/plugin", "plugin plugin", []string{"start plugin /nonexistent/plugin"}},
		{"other contract version", "old", "", "plugin test", []string{"another version of the plugin contract",
			fmt.Sprintf("this relay (version %d)", sdk.ProtocolVersion), fmt.Sprintf("Plugin version: %d", sdk.ProtocolVersion+98),
			"rebuild it against this relay's plugins/sdk"}},
		{"exits at start", "refuse-while", "", "plugin test", []string{"start plugin", "(the plugin said: cannot start: the gate is closed)"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := outboxtest.Store(t)
			spec, out := testPlugin(t, tt.mode, "TESTPLUGIN_GATE="+gate)
			if tt.path != "" {
				spec.Name, spec.Path = "", tt.path
			}
			seed(t, store, "m1", backends.StatusSent)
			d, _ := run(t, store, 50*time.Millisecond, spec)
			var err error
			eventually(t, func() bool { err = d.Ready()[tt.key]; return err != nil },
				func() string { return fmt.Sprintf("Ready says %v; want %q not ready", d.Ready(), tt.key) })
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Ready says %q, want it to say %q", err, w)
				}
			}
			var evs []*backends.Event
			eventually(t, func() bool {
				evs, _ = store.Events(context.Background(), "m1")
				return len(evs) == 1 && evs[0].Attempts >= 2 && strings.Contains(evs[0].LastError, tt.want[0])
			}, func() string { return "the event did not wait for the plugin: " + eventsText(evs) })
			if e := evs[0]; e.State == backends.EventAcked || e.State == backends.EventParked {
				t.Errorf("the event of a plugin that never ran is %s", e.State)
			}
			m, err := store.Get(context.Background(), "m1")
			if err != nil {
				t.Fatal(err)
			}
			if m.Status != backends.StatusSent && m.Status != backends.StatusCallingSent {
				t.Errorf("the message is %s; it must wait in SENT", m.Status)
			}
			if cs := calls(t, out); len(cs) != 0 {
				t.Errorf("a plugin that did not start was called: %+v", cs)
			}
		})
	}
}

// TestPluginStartedAgain: a plugin that did not start is started again,
// and gets the events that waited for it.
func TestPluginStartedAgain(t *testing.T) {
	store := outboxtest.Store(t)
	gate := closedGate(t)
	spec, out := testPlugin(t, "refuse-while", "TESTPLUGIN_GATE="+gate)
	id := seed(t, store, "m1", backends.StatusSent)
	d, _ := run(t, store, 50*time.Millisecond, spec)
	eventually(t, func() bool { return d.Ready()["plugin test"] != nil },
		func() string { return "a plugin that cannot start is reported ready" })
	if err := os.Remove(gate); err != nil {
		t.Fatal(err)
	}
	evs := waitEvents(t, store, "m1", backends.EventAcked)
	if evs[0].Attempts < 1 {
		t.Errorf("the tries while the plugin was down are not counted: %s", eventsText(evs))
	}
	if cs := calls(t, out); len(cs) != 1 || cs[0].EventID != id || cs[0].DeliveryAttempt != evs[0].Attempts+1 {
		t.Errorf("the plugin got %+v, want event %s at attempt %d", cs, id, evs[0].Attempts+1)
	}
	if err := d.Ready()["plugin test"]; err != nil {
		t.Errorf("a plugin started again is reported as %v", err)
	}
}

// TestPluginRestartedAfterCrash: a plugin that dies between calls is
// started again for the next event.
func TestPluginRestartedAfterCrash(t *testing.T) {
	store := outboxtest.Store(t)
	spec, out := testPlugin(t, "ok")
	seed(t, store, "m1", backends.StatusSent)
	d, _ := run(t, store, 50*time.Millisecond, spec)
	waitEvents(t, store, "m1", backends.EventAcked)
	first := calls(t, out)[0].PID
	p, err := os.FindProcess(first)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	eventually(t, func() bool { return !alive(first) }, func() string { return "the plugin survived SIGKILL" })
	id := seed(t, store, "m2", backends.StatusSent)
	d.Wake()
	waitEvents(t, store, "m2", backends.EventAcked)
	cs := calls(t, out)
	if len(cs) != 2 || cs[1].EventID != id || cs[1].PID == first {
		t.Errorf("the second event was not delivered by a new process: %+v", cs)
	}
	if err := d.Ready()["plugin test"]; err != nil {
		t.Errorf("a plugin started again is reported as %v", err)
	}
}

// TestPluginStoppedWithDispatcher: no plugin outlives the dispatcher's Run.
func TestPluginStoppedWithDispatcher(t *testing.T) {
	store := outboxtest.Store(t)
	spec, out := testPlugin(t, "ok")
	seed(t, store, "m1", backends.StatusSent)
	d := plugins.NewDispatcher(plugins.Config{Poll: 50 * time.Millisecond, Lease: time.Minute, Owner: "plugins-test", Concurrency: 64},
		store, []plugins.Spec{spec}, slog.New(slog.NewTextHandler(io.Discard, nil)), plugins.NewMetrics(prometheus.NewRegistry()))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	waitEvents(t, store, "m1", backends.EventAcked)
	pid := calls(t, out)[0].PID
	cancel()
	<-done
	eventually(t, func() bool { return !alive(pid) }, func() string { return fmt.Sprintf("plugin process %d outlived the dispatcher", pid) })
}

// alive reports whether process pid still runs.
func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	return err == nil && p.Signal(syscall.Signal(0)) == nil
}

// TestPluginFailingCalls: a plugin whose process runs but whose calls keep
// failing is reported, once three calls in a row failed, and no longer
// once one succeeds.
func TestPluginFailingCalls(t *testing.T) {
	store := outboxtest.Store(t)
	gate := closedGate(t)
	spec, out := testPlugin(t, "fail-while", "TESTPLUGIN_GATE="+gate)
	seed(t, store, "m1", backends.StatusSent)
	d, _ := run(t, store, 50*time.Millisecond, spec)
	var err error
	eventually(t, func() bool { err = d.Ready()["plugin test"]; return err != nil },
		func() string { return "a plugin whose calls all fail is reported ready" })
	if n := len(calls(t, out)); n < 3 {
		t.Errorf("reported failing after %d calls, want 3 in a row", n)
	}
	for _, w := range []string{"calls failed", "the gate is closed", "events wait"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Ready says %q, want it to say %q", err, w)
		}
	}
	if err := os.Remove(gate); err != nil {
		t.Fatal(err)
	}
	waitEvents(t, store, "m1", backends.EventAcked)
	if err := d.Ready()["plugin test"]; err != nil {
		t.Errorf("a plugin whose last call succeeded is reported as %v", err)
	}
}
