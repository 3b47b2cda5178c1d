package relay

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
)

// suppressionCollector reports the suppression list's active entries by
// reason at scrape time, read from the store every relay shares.
type suppressionCollector struct {
	list suppressionCounts
	desc *prometheus.Desc
}

// suppressionCounts is what the collector reads of the outbox.
type suppressionCounts interface {
	SuppressionCounts(ctx context.Context) (map[backends.SuppressionReason]int, error)
}

func newSuppressionCollector(l suppressionCounts) *suppressionCollector {
	return &suppressionCollector{list: l,
		desc: prometheus.NewDesc("postino_suppressions",
			"Active entries of the suppression list, by reason.", []string{"reason"}, nil)}
}

func (c *suppressionCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *suppressionCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.list.SuppressionCounts(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, reason := range backends.SuppressionReasons() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[reason]), string(reason))
	}
}
