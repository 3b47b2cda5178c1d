// Command postino-exec is a status-callback plugin that runs a command for
// each event, with the event as JSON on its standard input; an exit status
// of 0 acknowledges the event.
//
// It reads its settings from the environment it inherits from the relay:
//
//	POSTINO_EXEC_COMMAND   the command, run by /bin/sh -c (required)
//	POSTINO_EXEC_TIMEOUT   per run (default 30s)
//	POSTINO_EXEC_OUTCOMES  comma-separated outcomes to run it for (default all)
//
// The command also finds POSTINO_EVENT_ID, POSTINO_MESSAGE_ID and
// POSTINO_OUTCOME in its environment.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/genropy/postino/plugins/sdk"
)

type runner struct {
	command  string
	timeout  time.Duration
	outcomes []string
}

func (r *runner) Outcomes() []string { return r.outcomes }

func (r *runner) Deliver(ctx context.Context, e *sdk.Event) error {
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", r.command)
	cmd.Stdin = bytes.NewReader(body)
	cmd.Env = append(os.Environ(), "POSTINO_EVENT_ID="+e.EventID, "POSTINO_MESSAGE_ID="+e.MessageID, "POSTINO_OUTCOME="+e.Outcome)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 300 {
			msg = msg[len(msg)-300:]
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%q did not finish within %s", r.command, r.timeout)
		}
		return fmt.Errorf("%q failed (%v): %s", r.command, err, msg)
	}
	return nil
}

func configure() (*runner, error) {
	r := &runner{command: os.Getenv("POSTINO_EXEC_COMMAND"), timeout: 30 * time.Second}
	if r.command == "" {
		return nil, fmt.Errorf("POSTINO_EXEC_COMMAND is not set: give the command to run for each event")
	}
	if t := os.Getenv("POSTINO_EXEC_TIMEOUT"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil {
			return nil, fmt.Errorf("POSTINO_EXEC_TIMEOUT %q: %w", t, err)
		}
		r.timeout = d
	}
	for _, o := range strings.Split(os.Getenv("POSTINO_EXEC_OUTCOMES"), ",") {
		if o = strings.TrimSpace(o); o != "" {
			r.outcomes = append(r.outcomes, strings.ToUpper(o))
		}
	}
	return r, nil
}

func main() {
	r, err := configure()
	if err != nil {
		fmt.Fprintln(os.Stderr, "postino-exec:", err)
		os.Exit(1)
	}
	sdk.Serve(r)
}
