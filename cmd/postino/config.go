package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/genropy/postino/relay"
)

// configCmd prints the configuration serve would run with, from the same
// file and variables, checked.
func configCmd(args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] != "print" {
		return fmt.Errorf("%w: postino config needs print", errUsage)
	}
	fs := newFlagSet("config print", stdout)
	configPath := fs.String("config", os.Getenv("POSTINO_CONFIG"), "YAML configuration `file` (POSTINO_CONFIG)")
	rest, err := parseFlags(fs, args[1:])
	if err != nil {
		return err
	}
	if err := wantArgs("config print", rest); err != nil {
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
	_, err = stdout.Write(b)
	return err
}

// healthCmd exits 0 when the relay at --admin is ready (or degraded: mail
// flows), for container health checks.
func healthCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := newFlagSet("health", stdout)
	addr := adminFlag(fs)
	timeout := fs.Duration("timeout", 5*time.Second, "give up after this `duration`")
	rest, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := wantArgs("health", rest); err != nil {
		return err
	}
	c, err := adminClient(*addr, false)
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
	fmt.Fprintln(stdout, line)
	return nil
}
