package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/backends/dynamodb"
	"github.com/genropy/postino/backends/mysql"
	"github.com/genropy/postino/backends/postgres"
)

// store is a fresh outbox, opened here for the fill and the claims, and the
// flags and environment that make the relay open the same one.
type store struct {
	outbox    backends.Outbox
	data      string // the relay's data directory: the spool, and bbolt's file
	relayArgs []string
	relayEnv  []string
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

func newStore(ctx context.Context, o options, work string) (*store, error) {
	s := &store{data: filepath.Join(work, "data")}
	if err := os.MkdirAll(s.data, 0o750); err != nil {
		return nil, err
	}
	var err error
	switch o.store {
	case "bolt":
		s.open = func(context.Context) (backends.Outbox, error) {
			return bolt.Open(filepath.Join(s.data, "outbox.db"), bolt.Options{})
		}
		s.outbox, err = s.open(ctx)
	case "mysql":
		err = s.openMySQL(ctx, o.dsn)
	case "postgres":
		err = s.openPostgres(ctx, o.pgDSN)
	case "dynamodb":
		err = s.openDynamoDB(ctx, o.endpoint)
	default:
		return nil, fmt.Errorf("unknown store %q: give bolt, mysql, postgres or dynamodb", o.store)
	}
	if err != nil {
		return nil, err
	}
	s.relayArgs = append(s.relayArgs, "--backend", o.store)
	return s, nil
}

// openMySQL makes a fresh database on the server and brings its schema up
// to date, as postino migrate does.
func (s *store) openMySQL(ctx context.Context, server string) error {
	name := fmt.Sprintf("postino_depth_%d", os.Getpid())
	root, err := mysql.Connect(ctx, server, mysql.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	defer root.Close()
	if _, err := root.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	s.drop = func() error {
		db, err := mysql.Connect(context.Background(), server, mysql.Options{MaxConns: 1})
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.ExecContext(context.Background(), "DROP DATABASE "+name)
		return err
	}
	dsn := server + name
	db, err := mysql.Connect(ctx, dsn, mysql.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	_, err = mysql.Migrate(ctx, db)
	db.Close()
	if err != nil {
		return fmt.Errorf("migrate %s: %w", name, err)
	}
	s.open = func(ctx context.Context) (backends.Outbox, error) {
		return mysql.Open(ctx, dsn, mysql.Options{MaxConns: 32})
	}
	if s.outbox, err = s.open(ctx); err != nil {
		return err
	}
	s.relayArgs = []string{"--dsn", dsn}
	return nil
}

// openPostgres makes a fresh database on the server of dsn and brings its
// schema up to date, as postino migrate does.
func (s *store) openPostgres(ctx context.Context, server string) error {
	name := fmt.Sprintf("postino_depth_%d", os.Getpid())
	u, err := url.Parse(server)
	if err != nil || u.Scheme == "" {
		return fmt.Errorf("-pg-dsn %s: give a postgres:// URL (%v)", server, err)
	}
	exec := func(ctx context.Context, query string) error {
		root, err := postgres.Connect(ctx, server, postgres.Options{MaxConns: 1})
		if err != nil {
			return err
		}
		defer root.Close()
		_, err = root.Exec(ctx, query)
		return err
	}
	if err := exec(ctx, "CREATE DATABASE "+name); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	s.drop = func() error { return exec(context.Background(), "DROP DATABASE "+name+" WITH (FORCE)") }
	u.Path = "/" + name
	dsn := u.String()
	db, err := postgres.Connect(ctx, dsn, postgres.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	_, err = postgres.Migrate(ctx, db)
	db.Close()
	if err != nil {
		return fmt.Errorf("migrate %s: %w", name, err)
	}
	s.open = func(ctx context.Context) (backends.Outbox, error) {
		return postgres.Open(ctx, dsn, postgres.Options{MaxConns: 32})
	}
	if s.outbox, err = s.open(ctx); err != nil {
		return err
	}
	s.relayArgs = []string{"--dsn", dsn}
	return nil
}

// openDynamoDB makes a fresh table, as postino dynamodb create-table does.
func (s *store) openDynamoDB(ctx context.Context, endpoint string) error {
	table := fmt.Sprintf("postino_depth_%d", os.Getpid())
	opts := dynamoOptions(endpoint, table)
	if _, _, err := dynamodb.CreateTable(ctx, opts); err != nil {
		return err
	}
	fmt.Printf("table %s (kept with -keep: -reuse %s measures its claims again)\n", table, table)
	s.drop = func() error {
		client, _, err := dynamodb.Client(context.Background(), opts)
		if err != nil {
			return err
		}
		_, err = client.DeleteTable(context.Background(), &awsdynamodb.DeleteTableInput{TableName: aws.String(table)})
		return err
	}
	s.open = func(ctx context.Context) (backends.Outbox, error) { return dynamodb.Open(ctx, opts) }
	var err error
	if s.outbox, err = s.open(ctx); err != nil {
		return err
	}
	s.relayArgs = []string{"--table", table}
	s.relayEnv = []string{"AWS_ENDPOINT_URL=" + endpoint}
	return nil
}

// reuseDynamoDB opens a table an earlier run filled and kept.
func reuseDynamoDB(ctx context.Context, endpoint, table string) (*store, error) {
	o, err := dynamodb.Open(ctx, dynamoOptions(endpoint, table))
	if err != nil {
		return nil, err
	}
	return &store{outbox: o}, nil
}

// dynamoOptions are the store's options for table; DynamoDB Local takes
// any credentials.
func dynamoOptions(endpoint, table string) dynamodb.Options {
	env := map[string]string{"AWS_ACCESS_KEY_ID": "postino", "AWS_SECRET_ACCESS_KEY": "postino", "AWS_REGION": "us-east-1"}
	for k, v := range env {
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
	return dynamodb.Options{Table: table, Endpoint: endpoint, TTL: 14 * 24 * time.Hour}
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
