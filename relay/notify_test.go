package relay_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/postgres"
	"github.com/genropy/postino/backends/postgres/pgtest"
	"github.com/genropy/postino/relay"
)

// TestPostgresNotifications: on a PostgreSQL outbox a relay's intake
// worker, which polls once an hour here, takes at once a message another
// store on the database returned to ACCEPTED (as its housekeeping does when
// a lease runs out), woken by its notification; a new message wakes no one,
// since its own relay prepares it. A message created before the relay
// starts is taken by the worker's first look, which shows the worker
// running; the listener starts with the relay, at a moment the test cannot
// see: messages are returned until one is taken within two seconds, which
// only a notification can do.
func TestPostgresNotifications(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Migrated(t)
	other, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	body := []byte("Subject: x\r\n\r\nx\r\n")
	if err := other.Create(ctx, backendtest.BodyMessage("before", "0123456789ab", body)); err != nil {
		t.Fatal(err)
	}
	cfg, _ := testConfig(t)
	cfg.Outbox.Backend, cfg.Outbox.Postgres.DSN, cfg.Spool.Store = "postgres", dsn, relay.SpoolOutbox
	cfg.Intake.Poll = relay.Duration(time.Hour)
	start(t, cfg)

	taken := func(id string, within time.Duration) bool {
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			m, err := other.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if m.Status != backends.StatusAccepted {
				return true
			}
			time.Sleep(20 * time.Millisecond)
		}
		return false
	}
	if !taken("before", 60*time.Second) {
		t.Fatal("the relay's worker did not take in the message waiting at its start")
	}
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprintf("notified-%d", i)
		returned(t, other, backendtest.BodyMessage(id, "0123456789ab", body))
		if taken(id, 2*time.Second) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no message another store returned to ACCEPTED was taken in by the relay, whose intake polls hourly: its notifications do not wake it")
		}
	}
}

// returned creates m in s, claims it for intake and returns it to
// ACCEPTED, as a relay that lost its lease leaves it.
func returned(t *testing.T, s *postgres.Store, m *backends.Message) {
	t.Helper()
	ctx := context.Background()
	if err := s.Create(ctx, m); err != nil {
		t.Fatal(err)
	}
	for _, tr := range []backends.Transition{
		{ID: m.ID, From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: time.Now().Add(time.Hour)},
		{ID: m.ID, From: backends.StatusIntaking, To: backends.StatusAccepted, Reason: "lease ran out (test)"},
	} {
		if err := s.Transition(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
}
