package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/postgres"
	"github.com/genropy/postino/backends/postgres/pgtest"
)

// TestAdoptSeedRows: after Migrate, every row the seed left in a status of
// its own is taken over or told, and Adopt says what it found and did.
func TestAdoptSeedRows(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Database(t)
	pool, err := postgres.Connect(ctx, dsn, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := postgres.MigrateTo(ctx, pool, 1); err != nil {
		t.Fatal(err)
	}
	// The seed's tables and rows, as a tool that knows only the seed wrote them.
	for _, st := range []string{
		"DROP TABLE schema_migrations",
		`INSERT INTO emails (id, status, eml_file_path, payload_file_path, reason, version) VALUES
			('legacy-1', 'SENT-ACKNOWLEDGED', '/efs/legacy-1.eml', '/efs/legacy-1.json', 'done', 4),
			('r-ready', 'READY', '/efs/r-ready.eml', '/efs/r-ready.json', 'ready', 1),
			('r-proc', 'PROCESSING', '/efs/r-proc.eml', NULL, 'sending', 1),
			('r-acc', 'ACCEPTED', '/efs/r-acc.eml', '/efs/r-acc.json', '', 1),
			('r-noeml', 'READY', NULL, '/efs/r-noeml.json', '', 1),
			('r-sent', 'SENT', '/efs/r-sent.eml', NULL, '250 ok', 1),
			('r-calling', 'CALLING-FAILED-CALLBACK', '/efs/r-calling.eml', NULL, '550 no such user', 1)`,
	} {
		if _, err := pool.Exec(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
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
