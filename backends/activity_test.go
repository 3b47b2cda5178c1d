package backends

import (
	"slices"
	"testing"
	"time"
)

func TestTransitionActivities(t *testing.T) {
	then := func(sts ...Status) []Step {
		var out []Step
		for _, st := range sts {
			out = append(out, Step{To: st})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		t    Transition
		want []Activity
	}{
		{"claimed", Transition{From: StatusReady, To: StatusProcessing}, nil},
		{"prepared", Transition{From: StatusAccepted, To: StatusReady}, nil},
		{"not prepared", Transition{From: StatusAccepted, To: StatusInvalid}, []Activity{ActivityInvalid}},
		{"delivered", Transition{From: StatusProcessing, To: StatusSent, AddAttempt: true}, []Activity{ActivitySent}},
		{"delivered, nobody to tell", Transition{From: StatusProcessing, To: StatusSent, Then: then(StatusCallingSent, StatusSentAcknowledged)},
			[]Activity{ActivitySent}},
		{"deferred", Transition{From: StatusProcessing, To: StatusReady, AddAttempt: true}, []Activity{ActivityDeferred}},
		{"handed back", Transition{From: StatusProcessing, To: StatusReady}, nil},
		{"refused for good", Transition{From: StatusProcessing, To: StatusFailed, AddAttempt: true}, []Activity{ActivityFailed}},
		{"cancelled", Transition{From: StatusReady, To: StatusFailed}, []Activity{ActivityFailed}},
		{"retried", Transition{From: StatusFailedAcknowledged, To: StatusReady}, nil},
		{"plugin call failed", Transition{From: StatusCallingFailed, To: StatusFailed}, nil},
		{"bounce claimed", Transition{From: StatusSentAcknowledged, To: StatusBounced, Then: then(StatusCallingBounced)}, []Activity{ActivityBounced}},
		{"bounce claimed again", Transition{From: StatusCallingBounced, To: StatusBounced, Then: then(StatusCallingBounced)}, nil},
		{"seed outcome kept", Transition{From: StatusSent, To: StatusSent}, nil},
		{"PEC receipt", Transition{From: StatusSentAcknowledged, To: StatusPECDelivered}, nil},
	} {
		if got := tc.t.Activities(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTally(t *testing.T) {
	m := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	tally := Tally{}
	tally.Add(m.Add(90*time.Second), ActivitySent, 2)
	tally.Add(m.Add(61*time.Second), ActivitySent, 3) // another shard of that minute
	tally.Add(m.In(time.FixedZone("CET", 3600)), ActivityAccepted, 1)
	tally.Add(m.Add(2*time.Minute), ActivityFailed, 0) // nothing counted
	got := tally.Minutes()
	if len(got) != 2 || !got[0].At.Equal(m) || got[0].At.Location() != time.UTC || got[0].Counts[ActivityAccepted] != 1 ||
		!got[1].At.Equal(m.Add(time.Minute)) || got[1].Counts[ActivitySent] != 5 || len(got[1].Counts) != 1 {
		t.Errorf("minutes %+v", got)
	}
}
