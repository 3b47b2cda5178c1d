// Package backoff holds the retry schedule shared by delivery and the
// callback stage: exponential, capped, jittered so that work that failed
// together does not come back together.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Schedule waits First after the first failure, then doubles up to Max;
// each wait is varied by ±Jitter (a fraction below 1).
type Schedule struct {
	First  time.Duration
	Max    time.Duration
	Jitter float64
}

// Delay is the wait after the n-th failure (n from 1).
func (s Schedule) Delay(n int) time.Duration {
	d := s.First
	for i := 1; i < n && d < s.Max; i++ {
		d *= 2
	}
	d = min(d, s.Max)
	return time.Duration(float64(d) * (1 + s.Jitter*(2*rand.Float64()-1)))
}

// Outage is the schedule of a loop whose reads of the outbox or of a
// database fail: soon at first, so that a store back is seen at once, then
// no more often than every ten seconds, so that one down is not hammered by
// every relay at the same moment.
func Outage() Schedule {
	return Schedule{First: 100 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.2}
}

// Outages counts the failures in a row of a loop that reads the outbox or
// a database, and says how long it waits after each (Outage).
type Outages struct{ n int }

// Failed counts one more failure and returns the wait before the next try.
func (o *Outages) Failed() time.Duration {
	o.n++
	return Outage().Delay(o.n)
}

// Recovered starts the count again, after a read that worked.
func (o *Outages) Recovered() { o.n = 0 }
