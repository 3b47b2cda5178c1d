package admin

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/relay/delivery"
)

// TestDestinationsAPI: the sites' calls say what they need: a relay that
// does not deliver has no sites, a suspension needs its time, and a site
// this relay has not seen is not found but may be suspended, the
// suspension kept in the outbox until resume.
func TestDestinationsAPI(t *testing.T) {
	store := newStore(t)
	if w := serve(NewHandler(store, Options{}), http.MethodGet, "127.0.0.1", "/v1/destinations", ""); w.Code != http.StatusNotImplemented {
		t.Errorf("without sites: %d %s", w.Code, w.Body)
	}
	routes, err := delivery.NewRoutes([]delivery.Route{{Name: delivery.DefaultRoute, MaxConnections: 1}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	engine := delivery.NewEngine(delivery.Config{MaxInFlight: 1, Lease: time.Minute, MXConnections: 1, Owner: "test", Leases: store.Store},
		store, nil, routes, net.DefaultResolver, slog.New(slog.NewTextHandler(io.Discard, nil)), delivery.NewMetrics(prometheus.NewRegistry()), nil)
	h := NewHandler(store, Options{Sites: engine})
	list := decodeBody[SiteList](t, 200, serve(h, http.MethodGet, "127.0.0.1", "/v1/destinations", "").Body.Bytes())
	if list.Sites == nil || len(list.Sites) != 0 {
		t.Errorf("no site yet: %+v", list)
	}
	for _, tt := range []struct{ path, says string }{
		{"/v1/destinations/mx.example.net/suspend", "give how long"},
		{"/v1/destinations/mx.example.net/suspend?for=-1h", "give how long"},
		{"/v1/destinations/mx.example.net/suspend?for=900h", "give how long"},
	} {
		if w := serve(h, http.MethodPost, "127.0.0.1", tt.path, ""); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), tt.says) {
			t.Errorf("POST %s: %d %s", tt.path, w.Code, w.Body)
		}
	}
	if w := serve(h, http.MethodGet, "127.0.0.1", "/v1/destinations/mx.example.net", ""); w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "destinations list") {
		t.Errorf("a site not seen: %d %s", w.Code, w.Body)
	}
	w := serve(h, http.MethodPost, "127.0.0.1", "/v1/destinations/google/suspend?for=2h", "")
	s := decodeBody[Suspension](t, w.Code, w.Body.Bytes())
	if s.Site != "google" || s.By != "operator" || s.Until == nil || time.Until(*s.Until) < time.Hour {
		t.Errorf("suspension: %+v", s)
	}
	if c, err := store.ReadCursor(t.Context(), "suspend:google"); err != nil || c.Owner != "operator" || !c.LeaseUntil.After(time.Now().Add(time.Hour)) {
		t.Errorf("the suspension in the outbox: %+v %v", c, err)
	}
	if w := serve(h, http.MethodPost, "127.0.0.1", "/v1/destinations/google/resume", ""); w.Code != http.StatusOK {
		t.Errorf("resume: %d %s", w.Code, w.Body)
	}
	if c, err := store.ReadCursor(t.Context(), "suspend:google"); err != nil || c.LeaseUntil.After(time.Now()) {
		t.Errorf("the suspension resumed: %+v %v", c, err)
	}
}
