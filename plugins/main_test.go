package plugins_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/plugins"
	"github.com/genropy/postino/plugins/sdk"
)

// testPluginPath is the test plugin of testdata/testplugin, built once for
// the package's tests by TestMain.
var testPluginPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "postino-plugins")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testPluginPath = filepath.Join(dir, "testplugin")
	code := 1
	if out, err := exec.Command("go", "build", "-o", testPluginPath, "./testdata/testplugin").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "go build ./testdata/testplugin: %v\n%s", err, out)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// wait is how long a test waits for what proves a thing: long, for a
// loaded machine.
const wait = 60 * time.Second

// testPlugin declares the test plugin in a mode, named "test", with env
// added to its environment; it returns the file of the calls it gets.
func testPlugin(t *testing.T, mode string, env ...string) (plugins.Spec, string) {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "calls.jsonl")
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	return plugins.Spec{
		Name:    "test",
		Path:    testPluginPath,
		Env:     append([]string{"TESTPLUGIN_MODE=" + mode, "TESTPLUGIN_OUT=" + out, "TESTPLUGIN_STATE=" + state}, env...),
		Timeout: 10 * time.Second,
		Retry:   backoff.Schedule{First: 50 * time.Millisecond, Max: 200 * time.Millisecond},
	}, out
}

// closedGate makes the file a test plugin's gate is closed by (see
// testdata/testplugin); removing it opens the gate.
func closedGate(t *testing.T) string {
	t.Helper()
	gate := filepath.Join(t.TempDir(), "gate")
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return gate
}

// call is one event the test plugin got, as it recorded it.
type call struct {
	sdk.Event
	PID        int       `json:"pid"`
	ReceivedAt time.Time `json:"received_at"`
}

// calls reads the calls a test plugin recorded in out.
func calls(t *testing.T, out string) []call {
	t.Helper()
	f, err := os.Open(out)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cs []call
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var c call
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	return cs
}

// seed records message id as delivery or intake does when it reaches
// reached (SENT, FAILED or INVALID): its one recipient's result and the
// pending event of the outcome, whose id it returns.
func seed(t *testing.T, store *bolt.Store, id string, reached backends.Status) string {
	t.Helper()
	ctx := context.Background()
	m := &backends.Message{ID: id, MessageID: id + "@example.com", Priority: backends.PriorityNormal, Batch: "b1", EmlPath: id + ".eml",
		Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{"user@example.net"}}}
	if err := store.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	lease := time.Now().Add(time.Hour)
	steps := []backends.Transition{{From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: lease}}
	last := backends.StatusIntaking
	if reached != backends.StatusInvalid {
		steps = append(steps,
			backends.Transition{From: backends.StatusIntaking, To: backends.StatusReady, Route: "default"},
			backends.Transition{From: backends.StatusReady, To: backends.StatusProcessing, LeaseUntil: lease})
		last = backends.StatusProcessing
	}
	ev := backends.OutcomeEvent(last, reached, "seeded "+string(reached), nil)
	final := backends.Transition{From: last, To: reached, Reason: ev.Reason, Event: ev}
	if reached != backends.StatusInvalid {
		code, status := 250, outcome.RecipientSent
		if reached == backends.StatusFailed {
			code, status = 550, outcome.RecipientFailed
		}
		final.AddAttempt = true
		final.Results = []outcome.Recipient{{Address: "user@example.net", Status: status, Code: code, Host: "mx.example.net"}}
	}
	for _, tr := range append(steps, final) {
		tr.ID = id
		if err := store.Transition(ctx, tr); err != nil {
			t.Fatalf("seed %s: %v", id, err)
		}
	}
	return ev.ID
}

// run runs a dispatcher of specs on store until the test ends, polling
// every poll, with the concurrency the relay gives it and leases of a
// minute; it returns the dispatcher and the registry of its metrics.
func run(t *testing.T, store plugins.Store, poll time.Duration, specs ...plugins.Spec) (*plugins.Dispatcher, *prometheus.Registry) {
	t.Helper()
	return runLeased(t, store, poll, time.Minute, specs...)
}

// runLeased is run with leases of lease.
func runLeased(t *testing.T, store plugins.Store, poll, lease time.Duration, specs ...plugins.Spec) (*plugins.Dispatcher, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	d := plugins.NewDispatcher(plugins.Config{Poll: poll, Lease: lease, Owner: "plugins-test", Concurrency: 64, Version: "test"},
		store, specs, slog.New(slog.NewTextHandler(io.Discard, nil)), plugins.NewMetrics(reg))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return d, reg
}

// eventually waits until ok holds, and fails the test with what says
// where things stand when that takes longer than wait.
func eventually(t *testing.T, ok func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", wait, what())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitEvents waits until every event of message id is in state, and
// returns them in order.
func waitEvents(t *testing.T, store *bolt.Store, id string, state backends.EventState) []*backends.Event {
	t.Helper()
	var events []*backends.Event
	eventually(t, func() bool {
		var err error
		if events, err = store.Events(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			if e.State != state {
				return false
			}
		}
		return len(events) > 0
	}, func() string { return fmt.Sprintf("events of %s, want all %s: %s", id, state, eventsText(events)) })
	return events
}

func eventsText(events []*backends.Event) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "\n  %s %s %s attempts %d acked %v error %q", e.ID, e.Outcome, e.State, e.Attempts, e.Acked, e.LastError)
	}
	return b.String()
}

// history returns the statuses message id went through, and the reasons
// of each.
func history(t *testing.T, store *bolt.Store, id string) ([]backends.Status, []string) {
	t.Helper()
	h, err := store.History(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var st []backends.Status
	var reasons []string
	for _, e := range h {
		st = append(st, e.Status)
		reasons = append(reasons, e.Reason)
	}
	return st, reasons
}

// metric sums a counter's values, or a histogram's sample counts, over
// the series of reg that carry the label plugin=name (all, when name is
// empty).
func metric(t *testing.T, reg *prometheus.Registry, family, plugin string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			if plugin != "" && !hasLabel(m.GetLabel(), "plugin", plugin) {
				continue
			}
			sum += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

func hasLabel(labels []*dto.LabelPair, name, value string) bool {
	for _, l := range labels {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}
