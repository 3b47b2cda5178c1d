package plugins

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the callback stage's Prometheus series.
type Metrics struct {
	calls    *prometheus.CounterVec
	failures *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	parked   prometheus.Counter
}

// NewMetrics registers the series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_plugin_calls_total", Help: "Calls to each plugin."}, []string{"plugin"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_plugin_failures_total", Help: "Calls that failed or timed out, by plugin."}, []string{"plugin"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "postino_plugin_call_seconds", Help: "Time of one plugin call.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"plugin"}),
		parked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postino_events_parked_total", Help: "Events parked after their tries ran out."}),
	}
	reg.MustRegister(m.calls, m.failures, m.latency, m.parked)
	return m
}

func (m *Metrics) observe(plugin string, d time.Duration, err error) {
	m.calls.WithLabelValues(plugin).Inc()
	m.latency.WithLabelValues(plugin).Observe(d.Seconds())
	if err != nil {
		m.failures.WithLabelValues(plugin).Inc()
	}
}
