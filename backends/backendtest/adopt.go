package backendtest

import (
	"context"
	"maps"
	"testing"

	"github.com/genropy/postino/backends"
)

// CheckSeedAdoption checks what a store made of the seed's messages that
// the adoption tests write in each store's layout: r-ready and r-proc on
// their way, r-acc accepted, r-noeml naming no message file, r-sent and
// r-calling outcomes no plugin was told of, and done (the store's name for
// it), acknowledged already. got is what the adoption reported.
func CheckSeedAdoption(t *testing.T, s backends.Outbox, got backends.Adoption, done string) {
	t.Helper()
	wantFound := map[backends.Status]int{backends.StatusReady: 2, backends.StatusProcessing: 1, backends.StatusAccepted: 1,
		backends.StatusSent: 1, backends.StatusCallingFailed: 1, backends.StatusSentAcknowledged: 1}
	if !maps.Equal(got.Found, wantFound) || got.Queued != 3 || got.Told != 2 || got.Unsendable != 1 {
		t.Errorf("Adopt = %+v; want found %v, 3 queued, 2 told, 1 unsendable", got, wantFound)
	}
	ctx := context.Background()
	for id, want := range map[string]struct {
		status  backends.Status
		outcome string // the event that tells it, if any
	}{
		"r-ready": {backends.StatusAccepted, ""}, "r-proc": {backends.StatusAccepted, ""}, "r-acc": {backends.StatusAccepted, ""},
		"r-noeml": {backends.StatusInvalid, "INVALID"}, "r-sent": {backends.StatusSent, "SENT"}, "r-calling": {backends.StatusFailed, "FAILED"},
		done: {backends.StatusSentAcknowledged, ""},
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
}
