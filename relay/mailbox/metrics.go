package mailbox

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the pollers' Prometheus series, one set for all mailboxes.
type Metrics struct {
	up       *prometheus.GaugeVec
	errors   *prometheus.CounterVec
	messages *prometheus.CounterVec
}

// NewMetrics registers the series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "postino_mailbox_up", Help: "1 while the mailbox is watched (by this relay or one sharing the store), 0 while it cannot be."}, []string{"mailbox"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_mailbox_errors_total", Help: "Sessions with a mailbox that ended in an error (connection, login, folder)."}, []string{"mailbox"}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_mailbox_messages_total", Help: "Messages read from a mailbox, by where they went (processed, unmatched)."}, []string{"mailbox", "verdict"}),
	}
	reg.MustRegister(m.up, m.errors, m.messages)
	return m
}
