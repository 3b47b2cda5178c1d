package relay_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
	"github.com/genropy/postino/spool"
)

// TestSpoolDirectoryGoneAtStart starts a relay whose spool directory is
// not there (a shared volume not mounted yet): it changes no row, says it
// is degraded, and delivers everything, once each, when the files are back.
func TestSpoolDirectoryGoneAtStart(t *testing.T) {
	cfg, up := testConfig(t)
	cfg.Delivery.Retry.First = relay.Duration(200 * time.Millisecond)
	cfg.Delivery.Retry.Max = relay.Duration(time.Second)
	ids := []string{"gone-1", "gone-2", "gone-3"}
	paths := map[string]string{}
	seed(t, cfg, func(store *bolt.Store, sp *spool.Spool) {
		for _, id := range ids {
			paths[id] = spoolFile(t, sp, id, time.Now())
			create(t, store, id, paths[id], backends.StatusReady)
		}
	})
	dir := filepath.Join(cfg.DataDir, "spool")
	away := filepath.Join(cfg.DataDir, "unmounted")
	if err := os.Rename(dir, away); err != nil {
		t.Fatal(err)
	}

	rl := start(t, cfg)
	defer rl.stop()
	for _, id := range ids {
		m := waitMessage(t, rl.client, id, func(m admin.Message) bool { return m.Attempts > 0 })
		if m.Status != "READY" || !strings.Contains(m.Reason, "cannot be read") {
			t.Errorf("%s with its file out of sight: %s %q, want READY saying its file cannot be read", id, m.Status, m.Reason)
		}
	}
	if ready, err := rl.client.Ready(context.Background()); err != nil || ready.Status != "degraded" {
		t.Errorf("readiness %+v, %v: want degraded", ready, err)
	}
	if n := len(up.Messages()); n != 0 {
		t.Fatalf("%d messages reached the upstream with no file to send", n)
	}

	// The volume comes back: each file where its row says.
	for _, id := range ids {
		from, to := filepath.Join(away, paths[id]), filepath.Join(dir, paths[id])
		if err := os.MkdirAll(filepath.Dir(to), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(from, to); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	}
	if n := len(up.Messages()); n != len(ids) {
		t.Errorf("the upstream got %d messages, want %d: each once", n, len(ids))
	}
}
