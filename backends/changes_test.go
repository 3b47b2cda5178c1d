package backends

import (
	"slices"
	"testing"
	"time"
)

// TestChangesTake: the counts come in status order, those that sum to
// zero left out, and Take forgets what it returned.
func TestChangesTake(t *testing.T) {
	var c Changes
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	c.Add("m1", StatusReady, "r", at, nil)
	c.Count(StatusReady, 1)
	c.Count(StatusAccepted, -1)
	c.Count(StatusProcessing, 1)
	c.Count(StatusProcessing, -1)
	history, statuses, deltas := c.Take()
	if len(history) != 1 || history[0].MessageID != "m1" || history[0].Status != StatusReady ||
		!slices.Equal(statuses, []Status{StatusAccepted, StatusReady}) || !slices.Equal(deltas, []int{-1, 1}) {
		t.Errorf("Take = %+v, %v, %v", history, statuses, deltas)
	}
	if h, s, d := c.Take(); h != nil || s != nil || d != nil {
		t.Errorf("a second Take = %v, %v, %v; want nothing", h, s, d)
	}
}
