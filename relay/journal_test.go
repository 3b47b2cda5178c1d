package relay_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/internal/journal"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/spool"
)

// An outcome the previous run reached and kept in its journal is written at
// start, before the leases of the previous run are returned: the message,
// accepted upstream, is not sent again.
func TestStartupWritesKeptOutcomes(t *testing.T) {
	cfg, up := testConfig(t)
	seed(t, cfg, func(store *bolt.Store, sp *spool.Spool) {
		ctx := context.Background()
		create(t, store, "kept", spoolFile(t, sp, "kept", time.Now()), backends.StatusReady)
		now := time.Now().UTC()
		ms, err := store.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now,
			LeaseUntil: now.Add(time.Hour), Limit: 1, Reason: "claimed by the previous run"})
		if err != nil || len(ms) != 1 {
			t.Fatalf("claim: %v, %v", ms, err)
		}
		down := &outboxtest.Hiccup{Store: store}
		down.Failures.Store(1 << 30)
		j, err := journal.Open(filepath.Join(cfg.DataDir, "outcomes-"+cfg.Hostname+".db"), down,
			journal.Options{Retry: backoff.Schedule{First: time.Hour, Max: time.Hour}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		sent := backends.Transition{ID: "kept", From: backends.StatusProcessing, To: backends.StatusSent, Held: ms[0].LeaseUntil,
			Reason: "delivered to 1 of 1 recipients via default", AddAttempt: true,
			Event: backends.OutcomeEvent(backends.StatusProcessing, backends.StatusSent, "delivered", nil)}
		if err := j.Write(ctx, sent); err != nil || j.Len() != 1 {
			t.Fatalf("Write = %v, %d kept; want the outcome kept", err, j.Len())
		}
	})
	rl := start(t, cfg)
	defer rl.stop()
	m := waitStatus(t, rl.client, "kept", "SENT-ACKNOWLEDGED")
	if m.Attempts != 1 {
		t.Errorf("%d attempts, want the previous run's one", m.Attempts)
	}
	for _, h := range m.History {
		if h.Status == "READY" && h.Reason != "seeded" {
			t.Errorf("the message went back to READY: %+v", m.History)
		}
	}
	if n := len(up.Messages()); n != 0 {
		t.Errorf("the upstream got the message %d times again", n)
	}
}
