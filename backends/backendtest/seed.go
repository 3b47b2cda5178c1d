package backendtest

import (
	"context"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

// The SQL stores take over the tables of the seed layout (an outbox of the
// application Postino replaces): their tests make such a database, with the
// store's first migration, then these rows, and check what Migrate and
// Adopt make of them.

// SeedRows are the statements that make the seed's database of the tables
// migration 1 leaves: no schema_migrations, and legacy-1, acknowledged,
// with its history.
var SeedRows = []string{
	"DROP TABLE schema_migrations",
	`INSERT INTO emails (id, status, eml_file_path, payload_file_path, reason, version) VALUES
		('legacy-1', 'SENT-ACKNOWLEDGED', '/efs/legacy-1.eml', '/efs/legacy-1.json', 'done', 4)`,
	`INSERT INTO email_statuses (email_id, status, reason) VALUES ('legacy-1', 'ACCEPTED', ''), ('legacy-1', 'SENT', 'ok')`,
}

// SeedAdoptionRows are the seed's messages CheckSeedAdoption expects.
const SeedAdoptionRows = `INSERT INTO emails (id, status, eml_file_path, payload_file_path, reason) VALUES
	('r-ready', 'READY', '/efs/r-ready.eml', '/efs/r-ready.json', 'ready'),
	('r-proc', 'PROCESSING', '/efs/r-proc.eml', NULL, 'sending'),
	('r-acc', 'ACCEPTED', '/efs/r-acc.eml', '/efs/r-acc.json', ''),
	('r-noeml', 'READY', NULL, '/efs/r-noeml.json', ''),
	('r-sent', 'SENT', '/efs/r-sent.eml', NULL, '250 ok'),
	('r-calling', 'CALLING-FAILED-CALLBACK', '/efs/r-calling.eml', NULL, '550 no such user')`

// CheckSeedMigrated checks legacy-1 (SeedRows) in s, the store opened on
// the seed's database once migrated: the row keeps its values and its
// history.
func CheckSeedMigrated(t *testing.T, s backends.Outbox) {
	t.Helper()
	ctx := context.Background()
	m, err := s.Get(ctx, "legacy-1")
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != backends.StatusSentAcknowledged || m.EmlPath != "/efs/legacy-1.eml" || m.PayloadPath != "/efs/legacy-1.json" ||
		m.Version != 4 || m.Reason != "done" || m.Priority != backends.PriorityNormal {
		t.Errorf("legacy row after migration %+v", m)
	}
	if h, err := s.History(ctx, "legacy-1"); err != nil || len(h) != 2 || h[1].Status != backends.StatusSent {
		t.Errorf("legacy history %+v, %v", h, err)
	}
}

// AdoptSeedRows checks, after Migrate, that every row the seed left in a
// status of its own (SeedAdoptionRows) is taken over or told by adopt, that
// adopt says what it found and did, and that it does nothing twice. s is
// the store opened on the database.
func AdoptSeedRows(t *testing.T, s backends.Outbox, adopt func() (backends.Adoption, error)) {
	ctx := context.Background()
	got, err := adopt()
	if err != nil {
		t.Fatal(err)
	}
	CheckSeedAdoption(t, s, got, "legacy-1")
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
	if ms[0].PayloadPath == "" && ms[0].ID != "r-proc" {
		t.Errorf("the payload path was lost: %+v", ms[0])
	}
	// Once more: nothing is done twice.
	again, err := adopt()
	if err != nil || again.Told != 0 || again.Unsendable != 0 {
		t.Errorf("a second Adopt = %+v, %v; want nothing told or ended again", again, err)
	}
	if h, _ := s.History(ctx, "r-sent"); len(h) != 1 {
		t.Errorf("r-sent history after two adoptions: %+v", h)
	}
}
