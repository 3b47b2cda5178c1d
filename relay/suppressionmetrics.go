package relay

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
)

// suppressionCollector reports the suppression list's active entries by
// reason at scrape time, read from the store every relay shares, at most
// once per countsFor: the SQL stores count them from an index, which at a
// million entries costs the database a fifth of a second, and Prometheus
// scrapes every relay of a fleet every few seconds.
type suppressionCollector struct {
	list suppressionCounts
	desc *prometheus.Desc

	mu     sync.Mutex
	counts map[backends.SuppressionReason]int
	read   time.Time
}

// countsFor is how long the collector reports the counts it read.
const countsFor = time.Minute

// suppressionCounts is what the collector reads of the outbox.
type suppressionCounts interface {
	SuppressionCounts(ctx context.Context) (map[backends.SuppressionReason]int, error)
}

func newSuppressionCollector(l suppressionCounts) *suppressionCollector {
	return &suppressionCollector{list: l,
		desc: prometheus.NewDesc("postino_suppressions",
			"Active entries of the suppression list, by reason (read at most once a minute).", []string{"reason"}, nil)}
}

func (c *suppressionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *suppressionCollector) Collect(ch chan<- prometheus.Metric) {
	counts, err := c.current()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, reason := range backends.SuppressionReasons() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[reason]), string(reason))
	}
}

// current returns the counts read within countsFor, or reads them.
func (c *suppressionCollector) current() (map[backends.SuppressionReason]int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts != nil && time.Since(c.read) < countsFor {
		return c.counts, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.list.SuppressionCounts(ctx)
	if err != nil {
		return nil, err
	}
	c.counts, c.read = counts, time.Now()
	return counts, nil
}
