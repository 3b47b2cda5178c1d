package plugins

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/genropy/postino/internal/backoff"
	pb "github.com/genropy/postino/plugins/proto"
	"github.com/genropy/postino/plugins/sdk"
)

// Spec declares one plugin.
type Spec struct {
	// Name names it in logs, metrics and history; default: the file name.
	Name string
	Path string
	Args []string
	// Env adds KEY=value pairs to the relay's environment for the plugin.
	Env []string
	// Outcomes, when set, overrides what the plugin says it wants.
	Outcomes []string
	// Timeout bounds one call; a plugin that takes longer is killed and
	// started again.
	Timeout time.Duration
	// MaxAttempts (when not 0) and MaxAge (when not 0) bound the tries of
	// an event before it is parked.
	MaxAttempts int
	MaxAge      time.Duration
	// Retry spaces the tries of an event.
	Retry backoff.Schedule
}

// runner keeps one plugin process running: started on first use, started
// again (after a backoff) when it dies, killed when it hangs.
type runner struct {
	spec    Spec
	log     *slog.Logger
	version string

	mu        sync.Mutex
	client    *plugin.Client
	cb        pb.CallbackClient
	wants     map[string]bool // nil: everything
	lastErr   error
	nextStart time.Time
	backoff   time.Duration
	// failed counts the calls that failed since the last that did not,
	// the latest's error in lastCallErr.
	failed      int
	lastCallErr error
	lastCallAt  time.Time
}

// failingAfter is how many calls in a row must fail for a plugin whose
// process runs to be reported failing: one failure may be the app's blip,
// three in a row (with the backoff between an event's tries) are not.
const failingAfter = 3

func newRunner(spec Spec, log *slog.Logger, version string) *runner {
	if spec.Name == "" {
		spec.Name = filepath.Base(spec.Path)
	}
	return &runner{spec: spec, log: log.With("plugin", spec.Name), version: version}
}

// errNotRunning: the plugin is down and waits for its next start.
var errNotRunning = errors.New("plugin is not running")

// client returns the running plugin, starting it when it is time.
func (r *runner) running() (pb.CallbackClient, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client != nil && !r.client.Exited() {
		return r.cb, nil
	}
	if r.client != nil {
		r.client.Kill()
		r.client = nil
		r.log.Warn("plugin exited; starting it again")
	}
	if now := time.Now(); now.Before(r.nextStart) {
		return nil, fmt.Errorf("%w: %v; next start at %s", errNotRunning, r.lastErr, r.nextStart.Format(time.RFC3339))
	}
	if err := r.start(); err != nil {
		r.backoff = min(max(2*r.backoff, time.Second), time.Minute)
		r.nextStart = time.Now().Add(r.backoff)
		r.lastErr = err
		r.log.Error("plugin did not start; the relay goes on and tries again", "error", err, "retry_in", r.backoff)
		return nil, err
	}
	r.backoff, r.lastErr = 0, nil
	return r.cb, nil
}

// hclogWriter sends go-plugin's own errors to slog. Its warnings are left
// out: they repeat, less clearly, what the runner logs itself (a plugin that
// did not start "failed to exit gracefully").
type hclogWriter struct{ log *slog.Logger }

func (w hclogWriter) Write(p []byte) (int, error) {
	w.log.Warn(strings.TrimSpace(string(p)))
	return len(p), nil
}

// stderrTail logs what a plugin writes on its standard error and keeps the
// last lines, to explain a plugin that exits at start.
type stderrTail struct {
	log   *slog.Logger
	mu    sync.Mutex
	lines []string
}

func (t *stderrTail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		// go-plugin's own chatter from the plugin side is JSON at low levels.
		var j struct {
			Level string `json:"@level"`
		}
		if json.Unmarshal([]byte(l), &j) == nil && (j.Level == "trace" || j.Level == "debug" || j.Level == "info") {
			continue
		}
		if l = strings.TrimSpace(l); l != "" {
			t.log.Info("plugin says", "line", l)
			t.lines = append(t.lines, l)
		}
	}
	if len(t.lines) > 10 {
		t.lines = t.lines[len(t.lines)-10:]
	}
	return len(p), nil
}

func (t *stderrTail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.lines, " | ")
}

func (r *runner) start() error {
	cmd := exec.Command(r.spec.Path, r.spec.Args...)
	cmd.Env = append(os.Environ(), r.spec.Env...)
	dieWithRelay(cmd)
	tail := &stderrTail{log: r.log}
	client := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake(),
		Plugins:          sdk.Plugins(nil),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		StartTimeout:     15 * time.Second,
		Logger:           hclog.New(&hclog.LoggerOptions{Name: r.spec.Name, Output: hclogWriter{r.log}, Level: hclog.Error}),
		Stderr:           tail,
	})
	rpc, err := client.Client()
	if err != nil {
		client.Kill()
		if said := tail.String(); said != "" {
			err = fmt.Errorf("%w (the plugin said: %s)", err, said)
		}
		if strings.Contains(strings.ToLower(err.Error()), "incompatible api version") {
			return fmt.Errorf("plugin %s speaks another version of the plugin contract than this relay (version %d): rebuild it against this relay's plugins/sdk: %w",
				r.spec.Path, sdk.ProtocolVersion, err)
		}
		return fmt.Errorf("start plugin %s: %w", r.spec.Path, err)
	}
	raw, err := rpc.Dispense(sdk.PluginName)
	if err != nil {
		client.Kill()
		return fmt.Errorf("plugin %s: %w", r.spec.Path, err)
	}
	cb := raw.(pb.CallbackClient)
	ctx, cancel := context.WithTimeout(context.Background(), r.spec.Timeout)
	defer cancel()
	desc, err := cb.Describe(ctx, &pb.DescribeRequest{RelayVersion: r.version})
	if err != nil {
		client.Kill()
		return fmt.Errorf("plugin %s did not describe itself: %w", r.spec.Path, err)
	}
	outcomes := r.spec.Outcomes
	if len(outcomes) == 0 {
		outcomes = desc.Outcomes
	}
	r.wants = nil
	if len(outcomes) > 0 {
		r.wants = map[string]bool{}
		for _, o := range outcomes {
			r.wants[strings.ToUpper(o)] = true
		}
	}
	r.client, r.cb = client, cb
	r.log.Info("plugin started", "path", r.spec.Path, "calls_itself", desc.Name, "outcomes", outcomes)
	return nil
}

// wants reports whether the plugin wants an outcome. A plugin that never
// started yet is taken to want everything: its events wait for it.
func (r *runner) wantsOutcome(outcome string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.wants == nil || r.wants[outcome]
}

// kill stops a plugin that hangs or died; the next call starts it again.
func (r *runner) kill(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client != nil {
		r.log.Warn("killing plugin", "reason", why)
		r.client.Kill()
		r.client = nil
	}
}

// deliver calls the plugin with one event.
func (r *runner) deliver(ctx context.Context, e *pb.Event) (err error) {
	defer func() { r.note(err) }()
	cb, err := r.running()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.spec.Timeout)
	defer cancel()
	_, err = cb.Deliver(ctx, e)
	switch {
	case err == nil:
		return nil
	// The plugin's side may report the deadline before this side's timer
	// has marked ctx done: both mean the same hang.
	case ctx.Err() != nil, status.Code(err) == codes.DeadlineExceeded:
		r.kill("no answer within " + r.spec.Timeout.String())
		return fmt.Errorf("no answer within %s; the plugin was restarted", r.spec.Timeout)
	case status.Code(err) == codes.Unavailable:
		r.kill("the connection to it broke")
		return fmt.Errorf("the plugin died during the call: %v", status.Convert(err).Message())
	}
	return errors.New(status.Convert(err).Message())
}

// note counts a call's result: a success clears the failures.
func (r *runner) note(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.failed, r.lastCallErr = 0, nil
		return
	}
	r.failed++
	r.lastCallErr, r.lastCallAt = err, time.Now()
}

// state is the plugin's health for /readyz: down, or up but failing every
// call lately (its events wait all the same), or nil.
func (r *runner) state() error {
	if err := r.down(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed >= failingAfter {
		return fmt.Errorf("its last %d calls failed, the latest at %s: %w; its events wait and are tried again, see postino events list",
			r.failed, r.lastCallAt.UTC().Format(time.RFC3339), r.lastCallErr)
	}
	return nil
}

// down reports a plugin process that did not start, or nil.
func (r *runner) down() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client != nil && !r.client.Exited() {
		return nil
	}
	return r.lastErr // nil when not started yet: it starts on first use
}

func (r *runner) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client != nil {
		r.client.Kill()
		r.client = nil
	}
}
