package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/testrig/outboxtest"
)

// countedStore counts the listings the API makes.
type countedStore struct {
	*bolt.Store
	lists atomic.Int32
}

func (s *countedStore) List(ctx context.Context, q backends.ListQuery) ([]*backends.Message, string, error) {
	s.lists.Add(1)
	return s.Store.List(ctx, q)
}

func newStore(t *testing.T) *countedStore {
	t.Helper()
	store := outboxtest.Store(t)
	return &countedStore{Store: store}
}

func serve(h http.Handler, method, host, path, token string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.Host = host
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestHostWithoutToken: without a token, only requests addressed to this
// machine are answered; a rebinding site names its own host.
func TestHostWithoutToken(t *testing.T) {
	h := NewHandler(newStore(t), Options{})
	for _, tt := range []struct {
		host string
		code int
	}{
		{"127.0.0.1:8525", http.StatusOK}, {"localhost:8525", http.StatusOK}, {"[::1]:8525", http.StatusOK},
		{"LOCALHOST", http.StatusOK}, {"attacker.example:8525", http.StatusForbidden}, {"192.0.2.1:8525", http.StatusForbidden},
	} {
		if w := serve(h, "GET", tt.host, "/v1/messages", ""); w.Code != tt.code {
			t.Errorf("Host %s: %d %s, want %d", tt.host, w.Code, w.Body, tt.code)
		}
	}
	// With a token, the token decides, whatever the name.
	h = NewHandler(newStore(t), Options{Token: "s3cret"})
	if w := serve(h, "GET", "relay.internal:8525", "/v1/messages", "s3cret"); w.Code != http.StatusOK {
		t.Errorf("with the token: %d %s", w.Code, w.Body)
	}
}

// TestReadyzDetailNeedsToken: a probe gets the code; what failed, and why,
// only with the token.
func TestReadyzDetailNeedsToken(t *testing.T) {
	h := NewHandler(newStore(t), Options{Token: "s3cret", Ready: func(context.Context) map[string]error {
		return map[string]error{"outbox": errors.New("dial tcp db.internal:3306: connection refused")}
	}})
	for _, tt := range []struct {
		token  string
		detail bool
	}{{"", false}, {"wrong", false}, {"s3cret", true}} {
		w := serve(h, "GET", "relay.internal:8525", "/readyz", tt.token)
		if w.Code != http.StatusServiceUnavailable {
			t.Errorf("token %q: code %d", tt.token, w.Code)
		}
		var got Readiness
		json.Unmarshal(w.Body.Bytes(), &got)
		if shown := strings.Contains(w.Body.String(), "db.internal"); shown != tt.detail || (got.Checks != nil) != tt.detail {
			t.Errorf("token %q: %s", tt.token, w.Body)
		}
	}
}

// TestRecentReadsOnlyWhatItShows: /v1/stats answers from counters, and the
// overview lists read messages only when the counts say there are some to
// show, and again only when those counts change.
func TestRecentReadsOnlyWhatItShows(t *testing.T) {
	store := newStore(t)
	h := NewHandler(store, Options{})
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		if err := store.Create(ctx, &backends.Message{ID: id, EmlPath: id + ".eml", Priority: 2,
			Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{"x@example.net"}}}); err != nil {
			t.Fatal(err)
		}
	}
	recent := func() Recent {
		t.Helper()
		w := serve(h, "GET", "127.0.0.1", "/v1/stats/recent", "")
		var out Recent
		if err := json.Unmarshal(w.Body.Bytes(), &out); w.Code != http.StatusOK || err != nil {
			t.Fatalf("GET /v1/stats/recent: %d %s", w.Code, w.Body)
		}
		return out
	}
	if got := recent(); len(got["failed"]) != 0 || store.lists.Load() != 0 {
		t.Fatalf("nothing failed: %v, %d listings", got, store.lists.Load())
	}
	if err := store.Transition(ctx, backends.Transition{ID: "b", From: backends.StatusAccepted, To: backends.StatusFailed,
		Reason: "test", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if w := serve(h, "GET", "127.0.0.1", "/v1/stats", ""); w.Code != http.StatusOK || store.lists.Load() != 0 {
		t.Fatalf("/v1/stats: %d, %d listings", w.Code, store.lists.Load())
	}
	if f := recent()["failed"]; len(f) != 1 || f[0].ID != "b" || store.lists.Load() == 0 {
		t.Errorf("recent %+v after %d listings", f, store.lists.Load())
	}
	// Asked again with the same counts, as a dashboard does every few
	// seconds: the last reading answers.
	read := store.lists.Load()
	if f := recent()["failed"]; len(f) != 1 || f[0].ID != "b" || store.lists.Load() != read {
		t.Errorf("unchanged counts: recent %+v after %d more listings", f, store.lists.Load()-read)
	}
	if err := store.Transition(ctx, backends.Transition{ID: "c", From: backends.StatusAccepted, To: backends.StatusFailed,
		Reason: "test", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if f := recent()["failed"]; len(f) != 2 {
		t.Errorf("after another failure: recent %+v", f)
	}
}
