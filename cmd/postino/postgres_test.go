package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/genropy/postino/backends/postgres/pgtest"
)

// migratedPostgres is a pgtest.Database with the outbox schema.
func migratedPostgres(t *testing.T) string {
	t.Helper()
	dsn := pgtest.Database(t)
	if _, errOut, code := cli(t, "migrate", "--backend", "postgres", "--dsn", dsn); code != 0 {
		t.Fatalf("migrate: %s", errOut)
	}
	return dsn
}

func TestSharedPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three relays")
	}
	ctx := context.Background()
	dsn := pgtest.Database(t)
	// The schema first: serve refuses one that is behind.
	var out strings.Builder
	if code := run(ctx, []string{"serve", "--backend", "postgres", "--dsn", dsn, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data", t.TempDir()}, io.Discard, &out); code == 0 ||
		!strings.Contains(out.String(), "postino migrate --backend postgres") {
		t.Fatalf("serve on an empty database: exit %d, %s", code, out.String())
	}
	for range 2 {
		out.Reset()
		if code := run(ctx, []string{"migrate", "--backend", "postgres", "--dsn", dsn}, &out, &out); code != 0 {
			t.Fatalf("migrate: %s", out.String())
		}
	}
	if !strings.Contains(out.String(), "nothing to do") {
		t.Errorf("a second migrate said %q", out.String())
	}
	runShared(t, 3000, []string{"--backend", "postgres", "--dsn", dsn}, nil)
}

// TestFleetKillPostgres runs the fleet of runFleetKill on a PostgreSQL
// outbox.
func TestFleetKillPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three relays and kills one")
	}
	runFleetKill(t, []string{"--backend", "postgres", "--dsn", migratedPostgres(t)}, nil)
}

// TestConfigPrintPostgres: config print masks the password of a
// PostgreSQL DSN, in either of its forms.
func TestConfigPrintPostgres(t *testing.T) {
	for _, tt := range []struct{ dsn, want string }{
		{"postgres://postino:hunter2@db:5432/postino?sslmode=require", "dsn: postgres://postino:*****@db:5432/postino?sslmode=require"},
		{"postgres://db/postino?user=postino&password=hunter2", "dsn: postgres://db/postino?user=postino&password=*****"},
		{"host=db user=postino password=hunter2 dbname=postino", "dsn: host=db user=postino password=***** dbname=postino"},
		{"host=db password='hunter2 \\' x' dbname=postino", "dsn: host=db password=***** dbname=postino"},
	} {
		t.Setenv("POSTINO_BACKEND", "postgres")
		t.Setenv("POSTINO_OUTBOX_POSTGRES_DSN", tt.dsn)
		out, errOut, code := cli(t, "config", "print")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		if !strings.Contains(out, tt.want) || strings.Contains(out, "hunter2") {
			t.Errorf("config print of %s: want %q, and no password:\n%s", tt.dsn, tt.want, out)
		}
	}
}
