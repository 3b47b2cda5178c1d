package backoff

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    Schedule
		n    int
		base time.Duration
	}{
		{"first", Schedule{time.Minute, time.Hour, 0.2}, 1, time.Minute},
		{"second doubles", Schedule{time.Minute, time.Hour, 0.2}, 2, 2 * time.Minute},
		{"third", Schedule{time.Minute, time.Hour, 0.2}, 3, 4 * time.Minute},
		{"capped", Schedule{time.Minute, time.Hour, 0.2}, 7, time.Hour},
		{"long after the cap", Schedule{time.Minute, time.Hour, 0.2}, 30, time.Hour},
		{"no jitter", Schedule{time.Second, 5 * time.Minute, 0}, 4, 8 * time.Second},
		{"an outage, at first", Outage(), 1, 100 * time.Millisecond},
		{"an outage, capped", Outage(), 12, 10 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lo := time.Duration(float64(tt.base) * (1 - tt.s.Jitter))
			hi := time.Duration(float64(tt.base) * (1 + tt.s.Jitter))
			for range 50 {
				if d := tt.s.Delay(tt.n); d < lo || d > hi {
					t.Fatalf("Delay(%d) = %s, want %s ±%.0f%%", tt.n, d, tt.base, tt.s.Jitter*100)
				}
			}
		})
	}
}

// Outages waits on the Outage schedule for the failures in a row, and
// starts again once recovered.
func TestOutages(t *testing.T) {
	within := func(d, base time.Duration) bool {
		return d >= time.Duration(float64(base)*0.8) && d <= time.Duration(float64(base)*1.2)
	}
	var o Outages
	for i, base := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond} {
		if d := o.Failed(); !within(d, base) {
			t.Errorf("failure %d: wait %s, want %s ±20%%", i+1, d, base)
		}
	}
	o.Recovered()
	if d := o.Failed(); !within(d, 100*time.Millisecond) {
		t.Errorf("the first failure after recovering: wait %s, want 100ms ±20%%", d)
	}
}
