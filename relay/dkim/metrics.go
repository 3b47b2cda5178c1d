package dkim

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the signer's Prometheus series.
type Metrics struct {
	signatures *prometheus.CounterVec
	errors     *prometheus.CounterVec
	unsigned   prometheus.Counter
}

// NewMetrics registers the series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		signatures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_dkim_signatures_total", Help: "DKIM signatures made, by signing domain and algorithm."}, []string{"domain", "algorithm"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_dkim_errors_total", Help: "Messages that could not be signed, by signing domain."}, []string{"domain"}),
		unsigned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "postino_dkim_unsigned_total", Help: "Messages sent unsigned (or refused, with dkim.required) because their domain has no key."}),
	}
	reg.MustRegister(m.signatures, m.errors, m.unsigned)
	return m
}

func (m *Metrics) record(res Result, keys []*Key, err error) {
	if err != nil {
		m.errors.WithLabelValues(res.Domain).Inc()
		return
	}
	for _, k := range keys {
		m.signatures.WithLabelValues(k.Domain, k.Algorithm()).Inc()
	}
}
