package relay

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/genropy/postino/relay/admin"
)

// series is a counter the dashboard charts, by the outcome it counts;
// labels, when set, narrow the counter to part of its series.
type series struct {
	outcome string
	counter prometheus.Collector
	labels  map[string]string
}

// throughputMinutes is how far back the charts go.
const throughputMinutes = 60

// throughput turns the relay's own counters into counts per minute over the
// last hour, so that the dashboard's charts and /metrics cannot disagree.
// It counts what this relay did; Prometheus has the fleet.
type throughput struct {
	series []series

	mu sync.Mutex
	// marks are the counter totals at the start of each minute, oldest
	// first.
	marks []mark
}

type mark struct {
	at     time.Time
	totals map[string]float64
}

func newThroughput(s []series) *throughput {
	return &throughput{series: s}
}

// totals reads the counters now.
func (t *throughput) totals() map[string]float64 {
	out := map[string]float64{}
	for _, s := range t.series {
		ch := make(chan prometheus.Metric, 16)
		go func() { s.counter.Collect(ch); close(ch) }()
		for m := range ch {
			var d dto.Metric
			if m.Write(&d) != nil || !hasLabels(&d, s.labels) {
				continue
			}
			out[s.outcome] += d.GetCounter().GetValue()
		}
	}
	return out
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			n++
		}
	}
	return n == len(want)
}

// tick records the totals when a new minute has begun.
func (t *throughput) tick(now time.Time) {
	minute := now.UTC().Truncate(time.Minute)
	t.mu.Lock()
	defer t.mu.Unlock()
	if n := len(t.marks); n > 0 && !t.marks[n-1].at.Before(minute) {
		return
	}
	t.marks = append(t.marks, mark{at: minute, totals: t.totals()})
	if len(t.marks) > throughputMinutes {
		t.marks = t.marks[len(t.marks)-throughputMinutes:]
	}
}

// run ticks until done; a few seconds late at most, so that each minute
// counts what happened in it.
func (t *throughput) run(done <-chan struct{}) {
	t.tick(time.Now())
	tk := time.NewTicker(5 * time.Second)
	defer tk.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-tk.C:
			t.tick(now)
		}
	}
}

// Minutes is what happened in each of the last 60 minutes, oldest first,
// the current one last; minutes before the relay started count nothing.
func (t *throughput) Minutes(now time.Time) []admin.Minute {
	t.tick(now)
	current := t.totals()
	t.mu.Lock()
	defer t.mu.Unlock()
	start := now.UTC().Truncate(time.Minute).Add(-(throughputMinutes - 1) * time.Minute)
	out := make([]admin.Minute, throughputMinutes)
	for i := range out {
		out[i] = admin.Minute{At: start.Add(time.Duration(i) * time.Minute), Outcomes: map[string]int{}}
	}
	for i, m := range t.marks {
		next := current
		if i+1 < len(t.marks) {
			next = t.marks[i+1].totals
		}
		slot := int(m.at.Sub(start) / time.Minute)
		if slot < 0 || slot >= len(out) {
			continue
		}
		for _, s := range t.series {
			out[slot].Outcomes[s.outcome] = int(next[s.outcome] - m.totals[s.outcome])
		}
	}
	return out
}
