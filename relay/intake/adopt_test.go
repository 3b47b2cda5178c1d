package intake_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/relay/intake"
)

// TestAdoptSeedRows: a row of the seed layout has no envelope in the row;
// its files, at absolute paths on the old shared volume, give it one.
func TestAdoptSeedRows(t *testing.T) {
	sp, store := outboxtest.Open(t)
	volume := t.TempDir() // the seed's shared volume, outside the spool
	write := func(name, content string) string {
		p := filepath.Join(volume, name)
		if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const headers = "From: App <app@example.com>\r\nTo: a@example.net, B <b@example.net>\r\nCc: c@example.net\r\nSubject: old\r\n\r\n"
	tests := []struct {
		id, eml, payload string
		status           backends.Status
		sender           string
		rcpts            []string
		eightBit         bool
		reason           string
	}{
		{id: "payload", eml: write("payload.eml", headers+"caf\xc3\xa9\r\n"),
			payload: write("payload.json", `{"from": "bounces@example.com", "to": ["x@example.org", {"email": "y@example.org"}], "cc": "Z <z@example.org>", "subject": "s"}`),
			status:  backends.StatusReady, sender: "bounces@example.com", rcpts: []string{"x@example.org", "y@example.org", "z@example.org"}, eightBit: true},
		{id: "headers", eml: write("headers.eml", headers+"body\r\n"),
			status: backends.StatusReady, sender: "app@example.com", rcpts: []string{"a@example.net", "b@example.net", "c@example.net"}},
		{id: "payload-without-recipients", eml: write("p2.eml", headers+"body\r\n"), payload: write("p2.json", `{"subject": "only"}`),
			status: backends.StatusReady, sender: "app@example.com", rcpts: []string{"a@example.net", "b@example.net", "c@example.net"}},
		{id: "nobody", eml: write("nobody.eml", "From: app@example.com\r\nSubject: to whom?\r\n\r\nbody\r\n"),
			status: backends.StatusInvalid, reason: "name a recipient: send it again from the app, or cancel it"},
		{id: "bad-payload", eml: write("bad.eml", headers+"body\r\n"), payload: write("bad.json", `{"to": 42}`),
			status: backends.StatusInvalid, reason: "is not the JSON expected"},
		// The payload is on a volume not mounted here: try again later.
		{id: "payload-out-of-sight", eml: write("oos.eml", headers+"body\r\n"), payload: filepath.Join(volume, "not-here.json"),
			status: backends.StatusIntaking},
	}
	for _, tt := range tests {
		m := &backends.Message{ID: tt.id, Priority: 2, EmlPath: tt.eml, PayloadPath: tt.payload}
		if err := store.Create(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	w := intake.NewWorker(intake.WorkerConfig{Concurrency: 2, Lease: time.Minute, Poll: 10 * time.Millisecond, Owner: "test",
		MaxAge: 5 * 24 * time.Hour}, store, sp, func(*backends.Message) (string, error) { return "default", nil },
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	outboxtest.WaitCounts(t, store, 60*time.Second, func(n map[backends.Status]int) bool {
		return n[backends.StatusIntaking] == 1 && n[backends.StatusReady]+n[backends.StatusInvalid] == len(tests)-1
	})
	cancel()
	<-done

	for _, tt := range tests {
		m, err := store.Get(context.Background(), tt.id)
		if err != nil {
			t.Fatal(err)
		}
		if m.Status != tt.status || !strings.Contains(m.Reason, tt.reason) {
			t.Errorf("%s: %s %q, want %s with %q", tt.id, m.Status, m.Reason, tt.status, tt.reason)
		}
		if tt.status != backends.StatusReady {
			continue
		}
		env := m.Envelope
		if env.Sender != tt.sender || !slices.Equal(env.Recipients, tt.rcpts) || env.EightBit != tt.eightBit {
			t.Errorf("%s: envelope %+v, want from %s to %v, 8-bit %v", tt.id, env, tt.sender, tt.rcpts, tt.eightBit)
		}
		if fi, _ := os.Stat(tt.eml); env.Size != fi.Size() {
			t.Errorf("%s: size %d, want %d", tt.id, env.Size, fi.Size())
		}
		if m.EmlPath != tt.eml {
			t.Errorf("%s: the absolute path became %q", tt.id, m.EmlPath)
		}
	}
}
