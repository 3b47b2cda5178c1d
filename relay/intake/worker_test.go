package intake_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/relay/intake"
	"github.com/genropy/postino/spool"
)

func TestWorker(t *testing.T) {
	dir := t.TempDir()
	sp, err := spool.Open(filepath.Join(dir, "spool"))
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	store, err := bolt.Open(filepath.Join(dir, "outbox.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()

	later := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	tests := []struct {
		id     string
		file   string // under testdata; empty for a missing file
		due    time.Time
		sender string
		status backends.Status
		reason string
	}{
		{id: "plain", file: "plain.eml", status: backends.StatusReady, reason: "ready for route default"},
		{id: "later", file: "plain.eml", due: later, status: backends.StatusReady, reason: "not before"},
		{id: "multipart", file: "multipart-ok.eml", status: backends.StatusReady},
		{id: "unclosed", file: "multipart-unclosed.eml", status: backends.StatusInvalid, reason: "MIME part 1.2 is malformed"},
		{id: "no-boundary", file: "multipart-no-boundary.eml", status: backends.StatusInvalid, reason: "malformed"},
		{id: "deep", file: "multipart-deep.eml", status: backends.StatusInvalid, reason: "nested more than"},
		{id: "missing", status: backends.StatusInvalid, reason: "is missing"},
		{id: "unroutable", file: "plain.eml", sender: "nobody@nowhere.example", status: backends.StatusInvalid, reason: "no route for"},
	}
	for _, tt := range tests {
		path := "20260101/0000/" + tt.id + ".000000000000.eml"
		if tt.file != "" {
			f, err := sp.Create(tt.id, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			f.Write(b)
			if err := f.Commit(); err != nil {
				t.Fatal(err)
			}
			path = f.Path()
		}
		sender := tt.sender
		if sender == "" {
			sender = "app@example.com"
		}
		err := store.Create(context.Background(), &backends.Message{ID: tt.id, EmlPath: path, DueAt: tt.due, Priority: 2,
			Envelope: backends.Envelope{Sender: sender, Recipients: []string{"b@example.net"}}})
		if err != nil {
			t.Fatal(err)
		}
	}
	route := func(m *backends.Message) (string, error) {
		if strings.HasSuffix(m.Envelope.Sender, "@nowhere.example") {
			return "", errors.New("no route for " + m.Envelope.Sender)
		}
		return "default", nil
	}
	w := intake.NewWorker(intake.WorkerConfig{Concurrency: 3, Lease: time.Minute, Poll: 10 * time.Millisecond, Owner: "test"},
		store, sp, route, slog.New(slog.NewTextHandler(io.Discard, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, _ := store.Counts(context.Background())
		if n[backends.StatusAccepted]+n[backends.StatusIntaking] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker left messages behind: %v", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
		if tt.status == backends.StatusReady && m.Route != "default" {
			t.Errorf("%s: route %q", tt.id, m.Route)
		}
		if !tt.due.IsZero() && !m.DueAt.Equal(tt.due) {
			t.Errorf("%s: due %v, want %v", tt.id, m.DueAt, tt.due)
		}
		h, _ := store.History(context.Background(), tt.id)
		var statuses []string
		for _, e := range h {
			statuses = append(statuses, string(e.Status))
		}
		if got := strings.Join(statuses, " "); got != "ACCEPTED INTAKING "+string(tt.status) {
			t.Errorf("%s: history %s", tt.id, got)
		}
	}
}
