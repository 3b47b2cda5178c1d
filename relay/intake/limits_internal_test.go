package intake

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The cap on sessions per client counts an IPv6 client by its /64, as the
// AUTH limits do: one machine usually has the whole /64.
func TestSessionsPerClientByPrefix(t *testing.T) {
	l := &sessionLimits{max: 10, perClient: 2, log: slog.New(slog.DiscardHandler),
		metrics: NewMetrics(prometheus.NewRegistry()), byClient: map[netip.Prefix]int{}}
	now := time.Now()
	for _, tc := range []struct {
		ip   string
		want string
	}{
		{"2001:db8::1", ""},
		{"2001:db8::ffff:2", ""},
		{"2001:db8::3", "client_busy"},
		{"2001:db8:0:1::1", ""},
	} {
		if got := l.take(netip.MustParseAddr(tc.ip), false, now); got != tc.want {
			t.Errorf("session from %s: refusal %q, want %q", tc.ip, got, tc.want)
		}
	}
}
