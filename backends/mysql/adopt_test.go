package mysql_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/mysql"
)

// TestAdoptSeedRows: after Migrate, every row the seed left in a status of
// its own is taken over or told, and Adopt says what it found and did.
func TestAdoptSeedRows(t *testing.T) {
	ctx := context.Background()
	dsn, db := seedDatabase(t)
	for _, st := range []string{
		`INSERT INTO emails (id, status, eml_file_path, payload_file_path, reason) VALUES
			('r-ready', 'READY', '/efs/r-ready.eml', '/efs/r-ready.json', 'ready'),
			('r-proc', 'PROCESSING', '/efs/r-proc.eml', NULL, 'sending'),
			('r-acc', 'ACCEPTED', '/efs/r-acc.eml', '/efs/r-acc.json', ''),
			('r-noeml', 'READY', NULL, '/efs/r-noeml.json', ''),
			('r-sent', 'SENT', '/efs/r-sent.eml', NULL, '250 ok'),
			('r-calling', 'CALLING-FAILED-CALLBACK', '/efs/r-calling.eml', NULL, '550 no such user')`,
	} {
		if _, err := db.Exec(st); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	got, err := mysql.Adopt(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	wantFound := map[backends.Status]int{backends.StatusReady: 2, backends.StatusProcessing: 1, backends.StatusAccepted: 1,
		backends.StatusSent: 1, backends.StatusCallingFailed: 1, backends.StatusSentAcknowledged: 1}
	if !maps.Equal(got.Found, wantFound) || got.Queued != 3 || got.Told != 2 || got.Unsendable != 1 {
		t.Errorf("Adopt = %+v; want found %v, 3 queued, 2 told, 1 unsendable", got, wantFound)
	}

	s, err := mysql.Open(ctx, dsn, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for id, want := range map[string]struct {
		status  backends.Status
		outcome string // the event that tells it, if any
	}{
		"r-ready": {backends.StatusAccepted, ""}, "r-proc": {backends.StatusAccepted, ""}, "r-acc": {backends.StatusAccepted, ""},
		"r-noeml": {backends.StatusInvalid, "INVALID"}, "r-sent": {backends.StatusSent, "SENT"}, "r-calling": {backends.StatusFailed, "FAILED"},
		"legacy-1": {backends.StatusSentAcknowledged, ""},
	} {
		m, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := s.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if m.Status != want.status || (want.outcome == "") != (len(evs) == 0) || (len(evs) > 0 && (len(evs) != 1 || evs[0].Outcome != want.outcome)) {
			t.Errorf("%s: %s with events %+v; want %s, event %q", id, m.Status, evs, want.status, want.outcome)
		}
	}
	counts, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts[backends.StatusAccepted] != 3 || counts[backends.StatusInvalid] != 1 || counts[backends.StatusSent] != 1 ||
		counts[backends.StatusFailed] != 1 || counts[backends.StatusReady] != 0 || counts[backends.StatusProcessing] != 0 {
		t.Errorf("counts after the adoption: %v", counts)
	}
	// Intake claims the rows taken over, oldest first.
	ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusAccepted, To: backends.StatusIntaking, Now: time.Now().Add(time.Minute),
		LeaseUntil: time.Now().Add(time.Hour), Limit: 10})
	if err != nil || len(ms) != 3 {
		t.Fatalf("claim of the rows taken over = %d, %v; want 3", len(ms), err)
	}
	if ms[0].PayloadPath == "" && ms[0].ID != "r-proc" {
		t.Errorf("the payload path was lost: %+v", ms[0])
	}

	// Once more: nothing is done twice.
	again, err := mysql.Adopt(ctx, db)
	if err != nil || again.Told != 0 || again.Unsendable != 0 {
		t.Errorf("a second Adopt = %+v, %v; want nothing told or ended again", again, err)
	}
	if h, _ := s.History(ctx, "r-sent"); len(h) != 1 {
		t.Errorf("r-sent history after two adoptions: %+v", h)
	}
}
