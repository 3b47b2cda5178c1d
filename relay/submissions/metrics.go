package submissions

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the submissions readers' Prometheus series.
type Metrics struct {
	taken, failures *prometheus.CounterVec
}

// NewMetrics registers the submissions series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{taken: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "postino_submissions_taken_total",
		Help: "Submissions taken from the apps' tables, by table and result: queued (in the outbox, or there already by its id) or refused (recorded INVALID with the reason).",
	}, []string{"table", "result"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_submissions_failures_total",
			Help: "Batches that could not be taken from an app's table (its database down or missing, the table missing, access refused): the reader retries with back-off, and /readyz says why.",
		}, []string{"table"})}
	reg.MustRegister(m.taken, m.failures)
	return m
}
