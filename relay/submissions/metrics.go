package submissions

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the submissions readers' Prometheus series.
type Metrics struct {
	taken *prometheus.CounterVec
}

// NewMetrics registers the submissions series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{taken: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "postino_submissions_taken_total",
		Help: "Submissions taken from the apps' tables, by table and result: queued (in the outbox, or there already by its id) or refused (recorded INVALID with the reason).",
	}, []string{"table", "result"})}
	reg.MustRegister(m.taken)
	return m
}
