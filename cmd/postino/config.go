package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/genropy/postino/relay"
)

// loadValid loads the configuration serve would run with, from the same
// file and variables, and validates it as serve does before it opens
// anything: what serve would refuse is refused with the same messages.
func loadValid(inv *invocation) (relay.Config, error) {
	fs := inv.flags()
	configPath := configFlag(fs, "")
	if _, err := inv.parseArgs(fs); err != nil {
		return relay.Config{}, err
	}
	cfg, err := relay.LoadConfig(*configPath, os.Environ())
	if err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate(os.Getenv)
}

// configPrint prints the configuration serve would run with, validated.
func configPrint(_ context.Context, inv *invocation) error {
	cfg, err := loadValid(inv)
	if err != nil {
		return err
	}
	b, err := cfg.YAML()
	if err != nil {
		return err
	}
	_, err = inv.stdout.Write(b)
	return err
}

// configCheck says in one line that serve would start with the
// configuration, or fails with what would stop it.
func configCheck(_ context.Context, inv *invocation) error {
	if _, err := loadValid(inv); err != nil {
		return err
	}
	_, err := fmt.Fprintln(inv.stdout, "ok: serve would start with this configuration, as far as can be told without reaching the network")
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
