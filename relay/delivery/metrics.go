package delivery

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the delivery engine's Prometheus series.
type Metrics struct {
	delivered   *prometheus.CounterVec
	deferred    *prometheus.CounterVec
	failed      *prometheus.CounterVec
	latency     prometheus.Histogram
	connections prometheus.Gauge
	routeUp     *prometheus.GaugeVec
	dnsUp       prometheus.Gauge
}

// NewMetrics registers the delivery series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_delivery_delivered_total", Help: "Messages that ended SENT, by route."}, []string{"route"}),
		deferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_delivery_deferred_total", Help: "Attempts that left recipients for a later attempt, by route."}, []string{"route"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_delivery_failed_total", Help: "Messages that ended FAILED, by route."}, []string{"route"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "postino_delivery_latency_seconds",
			Help:    "Time from acceptance to SENT.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 4 * 3600, 24 * 3600},
		}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "postino_delivery_connections", Help: "Open upstream SMTP sessions."}),
		routeUp: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "postino_route_up", Help: "1 while a route's upstream takes connections; 0 once its last delivery.route_down_after " +
				"connection attempts in a row failed (on an MX route, to two domains at least), until a session to it opens again."}, []string{"route"}),
		dnsUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "postino_dns_up", Help: "1 while the resolvers of MX delivery answer; 0 while a lookup failed and they cannot answer " +
				"the root zone's NS question either, until one is answered again."}),
	}
	reg.MustRegister(m.delivered, m.deferred, m.failed, m.latency, m.connections, m.routeUp, m.dnsUp)
	return m
}
