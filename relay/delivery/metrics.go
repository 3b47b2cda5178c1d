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
	// By site: a provider's name, a site's MX hosts for the first
	// Config.SiteMetrics others, "other" beyond.
	siteSessions   *prometheus.GaugeVec
	siteThrottled  *prometheus.CounterVec
	siteHandedBack *prometheus.CounterVec
	sitesDown      *prometheus.GaugeVec
	sitesSuspended *prometheus.GaugeVec
	siteSlots      *prometheus.GaugeVec
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
		siteSessions: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "postino_site_sessions", Help: "Open sessions to the MX hosts of a site (a provider, or the first sites seen by their MX hosts, others together as other)."}, []string{"site"}),
		siteThrottled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_site_throttled_total", Help: "Throttling signals from a site (421, 4.7.x, a response rule, a connection refused, reset or timed out): each may cut its sessions and rate (AIMD)."}, []string{"site"}),
		siteHandedBack: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_site_handed_back_total", Help: "Messages handed back to the outbox without an attempt because their site was down, suspended, full (max_queued) or its rate would keep them waiting."}, []string{"site"}),
		sitesDown: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "postino_sites_down", Help: "Sites down (their last delivery.route_down_after connection attempts failed), tested by one probe per interval."}, []string{"site"}),
		sitesSuspended: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "postino_sites_suspended", Help: "Sites suspended by a response rule (Yahoo's TSS04, a blocklisting)."}, []string{"site"}),
		siteSlots: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "postino_site_slots", Help: "Session slots of a site this relay holds, of those the relays sharing the outbox share (its sessions at once): its part of the site's rates follows them."}, []string{"site"}),
	}
	reg.MustRegister(m.delivered, m.deferred, m.failed, m.latency, m.connections, m.routeUp, m.dnsUp,
		m.siteSessions, m.siteThrottled, m.siteHandedBack, m.sitesDown, m.sitesSuspended, m.siteSlots)
	return m
}
