package relay_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/internal/testrig/sqltest"
	"github.com/genropy/postino/relay"
)

// TestCreateOutbox: each store makes a fresh outbox where the settings
// name its server (a data directory for bbolt), which the relay then
// opens and keeps a message in; a second outbox of another name is
// another, without that message; both are dropped at the end.
func TestCreateOutbox(t *testing.T) {
	for _, store := range []string{"bolt", "mysql", "postgres", "dynamodb"} {
		t.Run(store, func(t *testing.T) {
			ctx := context.Background()
			cfg := relay.DefaultConfig()
			cfg.Outbox.Backend = store
			cfg.Outbox.MySQL.DSN, cfg.Outbox.Postgres.DSN = sqltest.ServerDSN("mysql"), sqltest.ServerDSN("postgres")
			cfg.Outbox.DynamoDB.Endpoint = dynamoDBEndpoint(t)
			serverUp(t, cfg)
			first := open(t, fresh(t, cfg, "first"))
			m := &backends.Message{ID: "created-1", EmlPath: "20260101/0000/created-1.0123456789ab.eml",
				Envelope: backends.Envelope{Sender: "a@example.com", Recipients: []string{"b@example.com"}}}
			if err := first.Create(ctx, m); err != nil {
				t.Fatal(err)
			}
			if _, err := first.Get(ctx, m.ID); err != nil {
				t.Errorf("the message created in the fresh outbox: %v", err)
			}
			second := open(t, fresh(t, cfg, "second"))
			if got, err := second.Get(ctx, m.ID); !errors.Is(err, backends.ErrNotFound) {
				t.Errorf("a second fresh outbox holds the first's message: %+v, %v", got, err)
			}
		})
	}
}

// fresh makes an outbox named after name with cfg's store (CreateOutbox),
// in a data directory of its own, dropped at the test's end, and returns
// cfg pointed at it.
func fresh(t *testing.T, cfg relay.Config, name string) relay.Config {
	t.Helper()
	cfg.DataDir = t.TempDir()
	drop, err := cfg.CreateOutbox(context.Background(), fmt.Sprintf("postino_create_%s_%d_%d", name, os.Getpid(), time.Now().UnixNano()%1e6))
	if drop != nil {
		t.Cleanup(func() {
			if err := drop(); err != nil {
				t.Errorf("drop: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// open opens cfg's outbox (OpenOutbox), closed before it is dropped.
func open(t *testing.T, cfg relay.Config) backends.Outbox {
	t.Helper()
	o, err := cfg.OpenOutbox(context.Background())
	return backendtest.Opened(t, o, err)
}

// dynamoDBEndpoint is the test's DynamoDB Local, which takes any
// credentials but the SDK wants some.
func dynamoDBEndpoint(t *testing.T) string {
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "postino", "AWS_SECRET_ACCESS_KEY": "postino", "AWS_REGION": "us-east-1"} {
		if os.Getenv(k) == "" {
			t.Setenv(k, v)
		}
	}
	if e := os.Getenv("TEST_POSTINO_DYNAMODB_ENDPOINT"); e != "" {
		return e
	}
	return "http://127.0.0.1:8000"
}

// serverUp skips the test, or fails it with CI=true, when the server of
// cfg's store does not answer.
func serverUp(t *testing.T, cfg relay.Config) {
	t.Helper()
	var addr string
	switch cfg.Outbox.Backend {
	case "mysql":
		d, err := gomysql.ParseDSN(cfg.Outbox.MySQL.DSN)
		if err != nil {
			t.Fatal(err)
		}
		addr = d.Addr
	case "postgres":
		addr = hostOf(t, cfg.Outbox.Postgres.DSN)
	case "dynamodb":
		addr = hostOf(t, cfg.Outbox.DynamoDB.Endpoint)
	default:
		return
	}
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is needed at %s: %v", cfg.Outbox.Backend, addr, err)
		}
		t.Skipf("no %s at %s: %v", cfg.Outbox.Backend, addr, err)
	}
	c.Close()
}

func hostOf(t *testing.T, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}
