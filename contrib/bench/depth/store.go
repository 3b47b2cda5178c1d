package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/relay"
)

// store is a fresh outbox, opened here for the fill and the claims, and the
// flags that make the relay open the same one.
type store struct {
	outbox    backends.Outbox
	data      string // the relay's data directory: the spool, and bbolt's file
	relayArgs []string
	drop      func() error
	// open opens the outbox again, as the relay does at its start.
	open func(ctx context.Context) (backends.Outbox, error)
}

func (s *store) cleanup(keep bool) {
	if keep || s.drop == nil {
		return
	}
	if err := s.drop(); err != nil {
		fmt.Fprintf(os.Stderr, "depth: cleanup: %v\n", err)
	}
}

// newStore makes a fresh outbox of the store o names where o's flags put
// its server, and brings its schema up to date, as postino migrate does
// (relay.Config.CreateOutbox); the relay opens it through a configuration
// file of its own.
func newStore(ctx context.Context, o options, work string) (*store, error) {
	s := &store{data: filepath.Join(work, "data")}
	if err := os.MkdirAll(s.data, 0o750); err != nil {
		return nil, err
	}
	cfg := outboxConfig(o, s.data)
	cfg.Outbox.Backend = o.store
	name := fmt.Sprintf("postino_depth_%d", os.Getpid())
	var err error
	if s.drop, err = cfg.CreateOutbox(ctx, name); err != nil {
		return nil, err
	}
	if o.store == "dynamodb" {
		fmt.Printf("table %s (kept with -keep: -reuse %s measures its claims again)\n", name, name)
	}
	s.open = cfg.OpenOutbox
	if s.outbox, err = s.open(ctx); err != nil {
		return nil, err
	}
	path := filepath.Join(work, "outbox.yaml")
	b, err := yaml.Marshal(struct {
		Outbox relay.OutboxConfig `yaml:"outbox"`
	}{cfg.Outbox})
	if err == nil {
		err = os.WriteFile(path, b, 0o600)
	}
	if err != nil {
		return nil, err
	}
	s.relayArgs = []string{"--config", path}
	return s, nil
}

// reuseDynamoDB opens a table an earlier run filled and kept.
func reuseDynamoDB(ctx context.Context, o options) (*store, error) {
	cfg := outboxConfig(o, o.work)
	cfg.Outbox.Backend, cfg.Outbox.DynamoDB.Table = "dynamodb", o.reuse
	outbox, err := cfg.OpenOutbox(ctx)
	if err != nil {
		return nil, err
	}
	return &store{outbox: outbox}, nil
}

// outboxConfig is a relay's configuration with the server of each store
// where o's flags put it, and the data directory data. DynamoDB Local
// takes any credentials.
func outboxConfig(o options, data string) relay.Config {
	env := map[string]string{"AWS_ACCESS_KEY_ID": "postino", "AWS_SECRET_ACCESS_KEY": "postino", "AWS_REGION": "us-east-1"}
	for k, v := range env {
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
	cfg := relay.DefaultConfig()
	cfg.DataDir = data
	cfg.Outbox.MySQL = relay.MySQLConfig{DSN: o.dsn, MaxConns: 32}
	cfg.Outbox.Postgres = relay.PostgresConfig{DSN: o.pgDSN, MaxConns: 32}
	cfg.Outbox.DynamoDB = relay.DynamoDBConfig{Endpoint: o.endpoint, TTL: relay.Duration(14 * 24 * time.Hour)}
	return cfg
}

// buildRelay builds the relay from the module the tool runs in.
func buildRelay(ctx context.Context, work string) (string, error) {
	bin := filepath.Join(work, "postino")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/postino")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/postino (run from the repository's root, or give -postino): %w", err)
	}
	return bin, nil
}

// findSink finds Postfix's smtp-sink.
func findSink(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	if p, err := exec.LookPath("smtp-sink"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/smtp-sink"); err == nil {
		return "/usr/sbin/smtp-sink", nil
	}
	return "", fmt.Errorf("smtp-sink not found: apt-get install -y postfix")
}
