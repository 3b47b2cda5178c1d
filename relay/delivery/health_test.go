package delivery

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/genropy/postino/internal/testrig/logtest"
)

// TestRouteHealth: a route is down once its last connection attempts, as
// many as the setting says, all failed, and, for an MX route, reached two
// domains at least; it is said once when it goes down and once when it
// comes back.
func TestRouteHealth(t *testing.T) {
	smarthost := Route{Name: DefaultRoute, Smarthost: "smtp.example:587", MaxConnections: 1}
	mx := Route{Name: DefaultRoute, MaxConnections: 1, MXPort: 25}
	tests := []struct {
		name   string
		route  Route
		events string // f:<domain> a failed attempt, ok a session
		down   bool
		downs  int // WARNs that the route is down
		ups    int // WARNs that it is up again
		says   string
	}{
		{name: "smarthost under the setting", route: smarthost, events: "f: f:"},
		{name: "smarthost down", route: smarthost, events: "f: f: f:", down: true, downs: 1,
			says: "the last 3 connection attempts to smarthost smtp.example:587 failed, the last: refused 3"},
		{name: "smarthost down once", route: smarthost, events: "f: f: f: f: f:", down: true, downs: 1,
			says: "the last 5 connection attempts"},
		{name: "a session in between", route: smarthost, events: "f: f: ok f: f:"},
		{name: "smarthost back", route: smarthost, events: "f: f: f: f: ok", downs: 1, ups: 1},
		{name: "down again", route: smarthost, events: "f: f: f: ok f: f: f:", down: true, downs: 2, ups: 1},
		{name: "mx one domain", route: mx, events: "f:a.example f:a.example f:a.example f:a.example"},
		{name: "mx two domains", route: mx, events: "f:a.example f:a.example f:a.example f:b.example", down: true, downs: 1,
			says: "the last 4 connection attempts to the MX hosts of its recipients' domains failed, the last: refused 4; its mail waits in READY: check that the relay can reach port 25"},
		{name: "mx several domains", route: mx, events: "f:a.example f:b.example f:c.example", down: true, downs: 1},
		{name: "mx a session in between", route: mx, events: "f:a.example f:b.example ok f:c.example f:c.example"},
		{name: "mx back", route: mx, events: "f:a.example f:b.example f:c.example ok", downs: 1, ups: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs, err := NewRoutes([]Route{tt.route}, nil)
			if err != nil {
				t.Fatal(err)
			}
			log, logs := logtest.Logger()
			m := NewMetrics(prometheus.NewRegistry())
			h := newHealth(rs, 3, log, m)[DefaultRoute]
			for i, ev := range strings.Fields(tt.events) {
				if domain, failed := strings.CutPrefix(ev, "f:"); failed {
					h.failure(domain, errors.New("refused "+strconv.Itoa(i+1)))
				} else {
					h.success()
				}
			}
			err = h.err()
			if (err != nil) != tt.down || err != nil && !strings.Contains(err.Error(), tt.says) {
				t.Errorf("err %v, want down %v saying %q", err, tt.down, tt.says)
			}
			wantUp := 1.0
			if tt.down {
				wantUp = 0
			}
			if got := testutil.ToFloat64(m.routeUp.WithLabelValues(DefaultRoute)); got != wantUp {
				t.Errorf("postino_route_up %v, want %v", got, wantUp)
			}
			if n := logs.Count("level=WARN msg=\"delivery: route down"); n != tt.downs {
				t.Errorf("%d WARNs that the route is down, want %d:\n%s", n, tt.downs, logs)
			}
			if n := logs.Count("level=WARN msg=\"delivery: route up again"); n != tt.ups {
				t.Errorf("%d WARNs that the route is up, want %d:\n%s", n, tt.ups, logs)
			}
		})
	}
}
