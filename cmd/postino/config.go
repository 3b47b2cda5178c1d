package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/genropy/postino/relay"
)

// configCmd prints the configuration serve would run with, from the same
// file and variables, checked.
func configPrint(_ context.Context, inv *invocation) error {
	fs := inv.flags()
	configPath := configFlag(fs, "")
	if _, err := inv.parseArgs(fs); err != nil {
		return err
	}
	cfg, err := relay.LoadConfig(*configPath, os.Environ())
	if err != nil {
		return err
	}
	if err := cfg.Check(); err != nil {
		return fmt.Errorf("the configuration would not start: %w", err)
	}
	b, err := cfg.YAML()
	if err != nil {
		return err
	}
	_, err = inv.stdout.Write(b)
	return err
}

// healthCmd exits 0 when the relay at --admin is ready (or degraded: mail
// flows), for container health checks.
func healthCmd(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this `duration`")
	c, _, err := inv.clientWith(fs, false, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	st, err := c.Ready(ctx)
	if err != nil {
		return err
	}
	// Degraded says what is: a plugin or a mailbox that is down.
	line := st.Status
	if bad := st.Failing(); bad != "" {
		line += ": " + bad
	}
	fmt.Fprintln(inv.stdout, line)
	return nil
}
