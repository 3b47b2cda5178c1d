package bolt

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
)

// TestUpgradeTo2 opens a file as schema 1 left it: a pending event
// waiting behind an earlier one in the claim queue, and a PEC message
// owed receipts without an alarm.
func TestUpgradeTo2(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	for _, m := range []*backends.Message{{ID: "pec-1", Priority: 2, EmlPath: "a.eml"}, {ID: "plain", Priority: 2, EmlPath: "b.eml"}} {
		if err := s.Create(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	steps := []backends.Transition{
		{From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: now.Add(time.Hour)},
		{From: backends.StatusIntaking, To: backends.StatusReady, Route: backends.PECRoutePrefix + "ufficio@pec.example.it"},
		{From: backends.StatusReady, To: backends.StatusProcessing, LeaseUntil: now.Add(time.Hour)},
		{From: backends.StatusProcessing, To: backends.StatusSent, Event: &backends.Event{ID: "sent-1", Outcome: "SENT"}},
	}
	for _, id := range []string{"pec-1", "plain"} {
		for _, tr := range steps {
			tr.ID = id
			if tr.Event != nil {
				tr.Event = &backends.Event{ID: id + "-sent", Outcome: "SENT"}
			}
			if id == "plain" && tr.Route != "" {
				tr.Route = "default"
			}
			if err := s.Transition(ctx, tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.AddEvent(ctx, &backends.Event{ID: "delay-1", MessageID: "pec-1", Outcome: "DELAYED"}); err != nil {
		t.Fatal(err)
	}
	// Schema 1 queued every pending event and set no alarm.
	err = s.db.Update(func(tx *bbolt.Tx) error {
		e, err := getEvent(tx, "delay-1")
		if err != nil {
			return err
		}
		if err := tx.Bucket(bucketEvQueue).Put(timeIDKey(e.DueAt, e.ID), nil); err != nil {
			return err
		}
		if err := clearAlarm(tx, backends.AlarmPECReceipts, "pec-1"); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Put([]byte("schema"), u64(1))
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()

	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var queued []string
	s.db.View(func(tx *bbolt.Tx) error {
		queued = dueEvents(tx, u64(unixNano(now.Add(time.Hour))), 100)
		return nil
	})
	slices.Sort(queued)
	if want := []string{"pec-1-sent", "plain-sent"}; !slices.Equal(queued, want) {
		t.Errorf("claim queue after the upgrade %v, want %v (the delay waits behind pec-1-sent)", queued, want)
	}
	alarms, err := s.DueAlarms(ctx, backends.AlarmPECReceipts, now.Add(time.Hour), 10)
	if err != nil || len(alarms) != 1 || alarms[0].MessageID != "pec-1" {
		t.Errorf("receipt alarms after the upgrade %+v, %v; want pec-1's", alarms, err)
	}
}
