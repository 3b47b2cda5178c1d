package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/postgres"
)

// TestAdoptSeedRows: after Migrate, every row the seed left in a status of
// its own is taken over or told, and Adopt says what it found and did.
func TestAdoptSeedRows(t *testing.T) {
	ctx := context.Background()
	dsn, pool := seedDatabase(t, `INSERT INTO emails (id, status, eml_file_path, payload_file_path, reason) VALUES
		('r-ready', 'READY', '/efs/r-ready.eml', '/efs/r-ready.json', 'ready'),
		('r-proc', 'PROCESSING', '/efs/r-proc.eml', NULL, 'sending'),
		('r-acc', 'ACCEPTED', '/efs/r-acc.eml', '/efs/r-acc.json', ''),
		('r-noeml', 'READY', NULL, '/efs/r-noeml.json', ''),
		('r-sent', 'SENT', '/efs/r-sent.eml', NULL, '250 ok'),
		('r-calling', 'CALLING-FAILED-CALLBACK', '/efs/r-calling.eml', NULL, '550 no such user')`)
	if _, err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	got, err := postgres.Adopt(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	s, err := postgres.Open(ctx, dsn, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	backendtest.CheckSeedAdoption(t, s, got, "legacy-1")
	counts, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts[backends.StatusAccepted] != 3 || counts[backends.StatusInvalid] != 1 || counts[backends.StatusSent] != 1 ||
		counts[backends.StatusFailed] != 1 || counts[backends.StatusReady] != 0 || counts[backends.StatusProcessing] != 0 {
		t.Errorf("counts after the adoption: %v", counts)
	}
	// Intake claims the rows taken over.
	ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusAccepted, To: backends.StatusIntaking, Now: time.Now().Add(time.Minute),
		LeaseUntil: time.Now().Add(time.Hour), Limit: 10})
	if err != nil || len(ms) != 3 {
		t.Fatalf("claim of the rows taken over = %d, %v; want 3", len(ms), err)
	}
	// Once more: nothing is done twice.
	again, err := postgres.Adopt(ctx, pool)
	if err != nil || again.Told != 0 || again.Unsendable != 0 {
		t.Errorf("a second Adopt = %+v, %v; want nothing told or ended again", again, err)
	}
	if h, _ := s.History(ctx, "r-sent"); len(h) != 1 {
		t.Errorf("r-sent history after two adoptions: %+v", h)
	}
}
