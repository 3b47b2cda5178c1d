package intake

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the intake's Prometheus series.
type Metrics struct {
	accepted prometheus.Counter
	refused  *prometheus.CounterVec
	latency  prometheus.Histogram
	sessions prometheus.Gauge
	// authLimited counts the AUTH limits reached, authClients the client
	// addresses whose failures are remembered.
	authLimited *prometheus.CounterVec
	authClients prometheus.Gauge
}

// NewMetrics registers the intake series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postino_intake_accepted_total",
			Help: "Messages answered 250 (duplicates of a queued id included).",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_intake_rejected_total",
			Help: "Clients, commands and messages refused, by reason (busy and client_busy: sessions over smtp.max_sessions or smtp.max_sessions_per_client; slow: transactions cut by smtp.transaction_timeout or smtp.min_data_rate).",
		}, []string{"reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "postino_intake_accept_seconds",
			Help:    "Time from DATA to the 250 reply, the message durable in spool and outbox.",
			Buckets: []float64{.0005, .001, .002, .003, .005, .0075, .01, .015, .02, .03, .05, .075, .1, .2, .5, 1, 2, 5},
		}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "postino_intake_sessions",
			Help: "SMTP sessions open, to compare with smtp.max_sessions.",
		}),
		authLimited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_intake_auth_limited_total",
			Help: "Sessions closed for failed AUTH: limit=session (too many in one session), client (too many from its address).",
		}, []string{"limit"}),
		authClients: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "postino_intake_auth_failing_clients",
			Help: "Client addresses with AUTH failures within smtp.auth.limits.window (bounded by smtp.auth.limits.clients).",
		}),
	}
	reg.MustRegister(m.accepted, m.refused, m.latency, m.sessions, m.authLimited, m.authClients)
	return m
}

func (m *Metrics) accept(d time.Duration) {
	m.accepted.Inc()
	m.latency.Observe(d.Seconds())
}

func (m *Metrics) rejected(reason string) {
	m.refused.WithLabelValues(reason).Inc()
}
