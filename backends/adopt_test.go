package backends

import (
	"testing"
	"time"
)

func TestSeedAdoption(t *testing.T) {
	for _, tc := range []struct {
		status  Status
		eml     string
		to      Status // "" when no move
		kind    Adopted
		outcome string
	}{
		{StatusAccepted, "a.eml", "", AdoptedQueued, ""},
		{StatusIntaking, "a.eml", StatusAccepted, AdoptedQueued, ""},
		{StatusReady, "a.eml", StatusAccepted, AdoptedQueued, ""},
		{StatusProcessing, "a.eml", StatusAccepted, AdoptedQueued, ""},
		{StatusReady, "", StatusInvalid, AdoptedUnsendable, "INVALID"},
		{StatusAccepted, "", StatusInvalid, AdoptedUnsendable, "INVALID"},
		{StatusSent, "a.eml", StatusSent, AdoptedTold, "SENT"},
		{StatusInvalid, "", StatusInvalid, AdoptedTold, "INVALID"},
		{StatusCallingFailed, "a.eml", StatusFailed, AdoptedTold, "FAILED"},
		{StatusSentAcknowledged, "a.eml", "", AdoptedNone, ""},
		{StatusFailedAcknowledged, "", "", AdoptedNone, ""},
	} {
		tr, kind := SeedAdoption(&Message{ID: "m", Status: tc.status, EmlPath: tc.eml, Reason: "why"}, time.Now())
		var to Status
		outcome := ""
		if tr != nil {
			to = tr.To
			if tr.From != tc.status || tr.Reason == "" {
				t.Errorf("%s (eml %q): move %+v", tc.status, tc.eml, tr)
			}
			if tr.Event != nil {
				outcome = tr.Event.Outcome
			}
		}
		if to != tc.to || kind != tc.kind || outcome != tc.outcome {
			t.Errorf("%s (eml %q): to %q, kind %d, event %q; want %q, %d, %q", tc.status, tc.eml, to, kind, outcome, tc.to, tc.kind, tc.outcome)
		}
	}
}
