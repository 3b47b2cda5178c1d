package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

var alarmTests = []test[alarmStore]{
	{"Alarms", testAlarms},
	{"AlarmWithTransition", testAlarmWithTransition},
	{"AlarmsGoWithTheirMessage", testAlarmsGoWithTheirMessage},
}

func dueAlarms(t *testing.T, s alarmStore, kind string, now time.Time, limit int) []string {
	t.Helper()
	as, err := s.DueAlarms(context.Background(), kind, now, limit)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		if a.Kind != kind || a.At.After(now) {
			t.Errorf("DueAlarms(%s, %v) gave %+v", kind, now, a)
		}
		out = append(out, a.MessageID)
	}
	return out
}

func setAlarm(t *testing.T, s alarmStore, kind, id string, at time.Time) {
	t.Helper()
	if err := s.SetAlarm(context.Background(), backends.Alarm{Kind: kind, MessageID: id, At: at}); err != nil {
		t.Fatalf("SetAlarm(%s, %s): %v", kind, id, err)
	}
}

func testAlarms(t *testing.T, s alarmStore) {
	ctx := context.Background()
	for i := range 5 {
		create(t, s, newMessage(fmt.Sprintf("alarm-%d", i)))
	}
	// Set out of order: they ring earliest first.
	for _, i := range []int{3, 0, 4, 1, 2} {
		setAlarm(t, s, "pec", fmt.Sprintf("alarm-%d", i), at(time.Duration(i)*time.Minute))
	}
	setAlarm(t, s, "other", "alarm-0", at(0))
	if got := dueAlarms(t, s, "pec", at(2*time.Minute), 10); !slices.Equal(got, []string{"alarm-0", "alarm-1", "alarm-2"}) {
		t.Errorf("due at 2m: %v, want [alarm-0 alarm-1 alarm-2]", got)
	}
	if got := dueAlarms(t, s, "pec", at(time.Hour), 2); !slices.Equal(got, []string{"alarm-0", "alarm-1"}) {
		t.Errorf("due, limit 2: %v", got)
	}
	// Moved later, an alarm is no longer due; set again, it is not doubled.
	setAlarm(t, s, "pec", "alarm-0", at(time.Hour))
	setAlarm(t, s, "pec", "alarm-1", at(time.Minute))
	if got := dueAlarms(t, s, "pec", at(4*time.Minute), 10); !slices.Equal(got, []string{"alarm-1", "alarm-2", "alarm-3", "alarm-4"}) {
		t.Errorf("due at 4m after moving alarm-0: %v", got)
	}
	for _, id := range []string{"alarm-1", "alarm-2", "nobody"} {
		if err := s.ClearAlarm(ctx, "pec", id); err != nil {
			t.Errorf("ClearAlarm(%s): %v", id, err)
		}
	}
	if got := dueAlarms(t, s, "pec", at(2*time.Hour), 10); !slices.Equal(got, []string{"alarm-3", "alarm-4", "alarm-0"}) {
		t.Errorf("due after clearing: %v", got)
	}
	if got := dueAlarms(t, s, "other", at(2*time.Hour), 10); !slices.Equal(got, []string{"alarm-0"}) {
		t.Errorf("another kind: %v", got)
	}
	if err := s.SetAlarm(ctx, backends.Alarm{Kind: "pec", MessageID: "nobody", At: at(0)}); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("an alarm on no message: %v", err)
	}
	if err := s.SetAlarm(ctx, backends.Alarm{Kind: "p#c", MessageID: "alarm-0", At: at(0)}); err == nil {
		t.Error("an alarm kind with # was accepted")
	}
}

// testAlarmWithTransition: an alarm set by a transition is there exactly
// when the move is.
func testAlarmWithTransition(t *testing.T, s alarmStore) {
	ctx := context.Background()
	walk(t, s, "alarmed", backends.StatusProcessing)
	walk(t, s, "refused", backends.StatusReady)
	for _, id := range []string{"alarmed", "refused"} {
		err := s.Transition(ctx, backends.Transition{ID: id, From: backends.StatusProcessing, To: backends.StatusSent, At: at(time.Hour),
			Reason: "delivered", Alarm: &backends.Alarm{Kind: "pec", At: at(90 * time.Minute)}})
		if id == "refused" && !errors.Is(err, backends.ErrLockNotAcquired) || id == "alarmed" && err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if got := dueAlarms(t, s, "pec", at(80*time.Minute), 10); len(got) != 0 {
		t.Errorf("due before its time: %v", got)
	}
	if got := dueAlarms(t, s, "pec", at(90*time.Minute), 10); !slices.Equal(got, []string{"alarmed"}) {
		t.Errorf("due: %v, want [alarmed] (a refused transition sets no alarm)", got)
	}
}

func testAlarmsGoWithTheirMessage(t *testing.T, s alarmStore) {
	walk(t, s, "purged", backends.StatusSentAcknowledged)
	walk(t, s, "kept", backends.StatusSent)
	setAlarm(t, s, "pec", "purged", at(0))
	setAlarm(t, s, "pec", "kept", at(0))
	if _, err := s.Purge(context.Background(), at(time.Hour), 10); err != nil {
		t.Fatal(err)
	}
	if got := dueAlarms(t, s, "pec", at(time.Hour), 10); !slices.Equal(got, []string{"kept"}) {
		t.Errorf("after purge: %v, want [kept]", got)
	}
}
