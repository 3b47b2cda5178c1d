package unsubscribe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genropy/postino/internal/testrig/logtest"
)

// recorder is an Unsubscriber that keeps what it is asked.
type recorder struct {
	mu   sync.Mutex
	reqs []Request
	err  error
}

func (r *recorder) Unsubscribe(_ context.Context, req Request) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reqs = append(r.reqs, req)
	return r.err
}

func (r *recorder) requests() []Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reqs)
}

var jane = Target{Stream: "news", Recipient: "jane@example.com", MessageID: "<1@x>"}

// now is the handlers' clock: an hour after t0, and still, so that the
// rate limiter's buckets do not refill during a test.
func now() time.Time { return t0.Add(time.Hour) }

// serve runs a handler over keyB (signing) and keyA (older, a minute's
// grace) with cfg's other fields.
func serve(t *testing.T, cfg Config) (*httptest.Server, *recorder) {
	t.Helper()
	rec := &recorder{}
	cfg.Keys = mustKeys(t, time.Minute, keyB, keyA)
	if cfg.Unsubscriber == nil {
		cfg.Unsubscriber = rec
	}
	cfg.Now = now
	srv := httptest.NewServer(NewHandler(cfg))
	t.Cleanup(srv.Close)
	return srv, rec
}

func link(t *testing.T, srv *httptest.Server, u Target) string {
	return srv.URL + "/u/" + mustToken(t, mustKeys(t, time.Minute, keyB), u, t0)
}

type response struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, method, target, contentType string, body io.Reader, header http.Header) response {
	t.Helper()
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

func oneClick(t *testing.T, target string) response {
	return do(t, "POST", target, "application/x-www-form-urlencoded", strings.NewReader(OneClick), nil)
}

func TestGetShowsAndDoesNotUnsubscribe(t *testing.T) {
	srv, rec := serve(t, Config{})
	r := do(t, "GET", link(t, srv, jane), "", nil, nil)
	if r.status != 200 || !strings.Contains(r.body, `<form method="post">`) || !strings.Contains(r.body, `name="List-Unsubscribe" value="One-Click"`) {
		t.Fatalf("GET: %d %s", r.status, r.body)
	}
	if strings.Contains(r.body, jane.Recipient) || !strings.Contains(r.body, "j***@example.com") {
		t.Errorf("the page shows the address unmasked, or not masked: %s", r.body)
	}
	if got := rec.requests(); len(got) != 0 {
		t.Errorf("GET unsubscribed: %+v", got)
	}
	want := map[string]string{
		"X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store",
		"X-Content-Type-Options": "nosniff", "Content-Type": "text/html; charset=utf-8",
	}
	for k, v := range want {
		if got := r.header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	// The policy allows the page's style by its hash, and nothing else.
	csp := r.header.Get("Content-Security-Policy")
	styles := regexp.MustCompile(`(?s)<style>(.*?)</style>`).FindAllStringSubmatch(r.body, -1)
	if len(styles) != 1 {
		t.Fatalf("the page has %d style elements", len(styles))
	}
	sum := sha256.Sum256([]byte(styles[0][1]))
	if !strings.HasPrefix(csp, "default-src 'none'; ") || !strings.Contains(csp, "style-src 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"';") ||
		!strings.Contains(csp, "form-action 'self'") {
		t.Errorf("Content-Security-Policy %q does not allow the page's style alone", csp)
	}
}

func TestOneClick(t *testing.T) {
	var multi bytes.Buffer
	mw := multipart.NewWriter(&multi)
	mw.WriteField("List-Unsubscribe", "One-Click")
	mw.Close()
	var big bytes.Buffer
	bw := multipart.NewWriter(&big)
	bw.WriteField("List-Unsubscribe", "One-Click")
	bw.WriteField("x", strings.Repeat("x", 2*maxBody))
	bw.Close()
	for _, c := range []struct {
		name, contentType, body string
		status                  int
	}{
		{"urlencoded", "application/x-www-form-urlencoded", OneClick, 200},
		{"multipart", mw.FormDataContentType(), multi.String(), 200},
		{"no field", "application/x-www-form-urlencoded", "a=b", 400},
		{"other value", "application/x-www-form-urlencoded", "List-Unsubscribe=yes", 400},
		{"not a form", "text/plain", OneClick, 400},
		{"empty", "", "", 400},
		{"too big", "application/x-www-form-urlencoded", OneClick + "&x=" + strings.Repeat("x", 2*maxBody), 413},
		{"too big multipart", bw.FormDataContentType(), big.String(), 413},
	} {
		srv, rec := serve(t, Config{})
		r := do(t, "POST", link(t, srv, jane), c.contentType, strings.NewReader(c.body), nil)
		if r.status != c.status {
			t.Errorf("%s: %d %s; want %d", c.name, r.status, r.body, c.status)
		}
		got := rec.requests()
		if c.status != 200 {
			if len(got) != 0 {
				t.Errorf("%s: unsubscribed: %+v", c.name, got)
			}
			continue
		}
		if len(got) != 1 || got[0].Target != jane || got[0].Via != "https" || got[0].Client != "127.0.0.1" || !got[0].At.Equal(now()) {
			t.Errorf("%s: unsubscribed %+v", c.name, got)
		}
		// Twice is fine: the store makes the second a no-op.
		if r := oneClick(t, link(t, srv, jane)); r.status != 200 || len(rec.requests()) != 2 {
			t.Errorf("%s: the second POST: %d, %d requests", c.name, r.status, len(rec.requests()))
		}
	}
}

func TestCurlOneClick(t *testing.T) {
	srv, rec := serve(t, Config{})
	out, err := exec.Command("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-X", "POST", "-d", OneClick, link(t, srv, jane)).CombinedOutput()
	if err != nil || string(out) != "200" {
		t.Fatalf("curl: %s, %v", out, err)
	}
	if got := rec.requests(); len(got) != 1 || got[0].Target != jane {
		t.Errorf("curl's POST unsubscribed %+v", got)
	}
}

// TestBadTokensLookAlike: every kind of bad token gets the same response,
// but for its Date.
func TestBadTokensLookAlike(t *testing.T) {
	srv, rec := serve(t, Config{})
	var first *response
	for name, tok := range badTokens(t) {
		for _, method := range []string{"GET", "POST"} {
			r := do(t, method, srv.URL+"/u/"+url.PathEscape(tok), "application/x-www-form-urlencoded", strings.NewReader(OneClick), nil)
			r.header.Del("Date")
			if r.status != 400 {
				t.Errorf("%s %s: %d", method, name, r.status)
			}
			if first == nil {
				first = &r
				continue
			}
			if r.body != first.body || !equalHeaders(r.header, first.header) {
				t.Errorf("%s %s: the response differs:\n%v %s\n%v %s", method, name, r.header, r.body, first.header, first.body)
			}
		}
	}
	if got := rec.requests(); len(got) != 0 {
		t.Errorf("a bad token unsubscribed: %+v", got)
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestRoutes(t *testing.T) {
	srv, rec := serve(t, Config{})
	tok := link(t, srv, jane)
	for _, c := range []struct {
		method, target string
		status         int
		allow          string
	}{
		{"GET", srv.URL + "/", 404, ""},
		{"GET", srv.URL + "/u/", 404, ""},
		{"GET", tok + "/more", 404, ""},
		{"POST", srv.URL + "/unsubscribe", 404, ""},
		{"PUT", tok, 405, "GET, HEAD, POST"},
		{"DELETE", tok, 405, "GET, HEAD, POST"},
		{"HEAD", tok, 200, ""},
	} {
		r := do(t, c.method, c.target, "application/x-www-form-urlencoded", strings.NewReader(OneClick), nil)
		if r.status != c.status || r.header.Get("Allow") != c.allow {
			t.Errorf("%s %s: %d, Allow %q; want %d, %q", c.method, c.target, r.status, r.header.Get("Allow"), c.status, c.allow)
		}
		if r.header.Get("Content-Security-Policy") == "" || r.header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s %s: no security headers", c.method, c.target)
		}
	}
	if got := rec.requests(); len(got) != 0 {
		t.Errorf("unsubscribed: %+v", got)
	}
}

func TestUnsubscriberFails(t *testing.T) {
	log, buf := logtest.Logger()
	rec := &recorder{err: errors.New("store down: secret detail")}
	srv, _ := serve(t, Config{Unsubscriber: rec, Logger: log})
	r := oneClick(t, link(t, srv, jane))
	if r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Errorf("%d, Retry-After %q; want 503 with Retry-After", r.status, r.header.Get("Retry-After"))
	}
	if strings.Contains(r.body, "secret") {
		t.Errorf("the response tells the error: %s", r.body)
	}
	if buf.Count("secret detail") != 1 {
		t.Errorf("the error is not logged: %s", buf)
	}
}

func TestRateLimit(t *testing.T) {
	cfg := Config{Rate: 0.001, Burst: 2, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	xff := func(v ...string) http.Header { return http.Header{"X-Forwarded-For": v} }
	t.Run("untrusted peer", func(t *testing.T) {
		srv, _ := serve(t, cfg)
		target := link(t, srv, jane)
		for i := range 2 {
			if r := do(t, "GET", target, "", nil, xff("192.0.2.1")); r.status != 200 {
				t.Fatalf("request %d: %d", i, r.status)
			}
		}
		// A forged X-Forwarded-For from a peer not trusted changes
		// nothing.
		for _, h := range []http.Header{nil, xff("192.0.2.99"), xff("10.1.1.1"), xff("198.51.100.1, 10.0.0.1")} {
			r := do(t, "GET", target, "", nil, h)
			if r.status != 429 || r.header.Get("Retry-After") != "1000" {
				t.Errorf("X-Forwarded-For %v: %d, Retry-After %q; want 429, 1000", h, r.status, r.header.Get("Retry-After"))
			}
		}
	})
	t.Run("one-click POSTs of valid tokens", func(t *testing.T) {
		srv, u := serve(t, cfg)
		target := link(t, srv, jane)
		// A provider posts its users' unsubscribes from one address: none
		// waits; a forged token from it is charged, then refused.
		for i := range 5 {
			if r := oneClick(t, target); r.status != 200 {
				t.Fatalf("one-click POST %d: %d", i, r.status)
			}
		}
		forged := target[:len(target)-3] + "AAA"
		codes := []int{}
		for range 3 {
			codes = append(codes, oneClick(t, forged).status)
		}
		if !slices.Equal(codes, []int{400, 400, 429}) {
			t.Errorf("forged tokens: %v, want 400 400 429", codes)
		}
		if n := len(u.requests()); n != 5 {
			t.Errorf("%d unsubscribes, want 5", n)
		}
	})
	t.Run("trusted proxy", func(t *testing.T) {
		cfg := cfg
		cfg.TrustedProxies = append(cfg.TrustedProxies, netip.MustParsePrefix("127.0.0.0/8"))
		srv, _ := serve(t, cfg)
		target := link(t, srv, jane)
		for i := range 2 {
			if r := do(t, "GET", target, "", nil, xff("192.0.2.1")); r.status != 200 {
				t.Fatalf("request %d: %d", i, r.status)
			}
		}
		for _, c := range []struct {
			xff    []string
			status int
		}{
			{[]string{"192.0.2.1"}, 429},
			{[]string{"203.0.113.9, 192.0.2.1"}, 429},             // what the client wrote is left of its address
			{[]string{"203.0.113.9", "192.0.2.1, 10.2.3.4"}, 429}, // through a second trusted proxy
			{[]string{"::ffff:192.0.2.1"}, 429},
			{[]string{"192.0.2.2"}, 200},
			{[]string{"2001:db8:1:1::1"}, 200},
			{[]string{"2001:db8:1:1::2"}, 200}, // the same /64
			{[]string{"2001:db8:1:1::3"}, 429},
			{[]string{"2001:db8:1:2::1"}, 200},
		} {
			if r := do(t, "GET", target, "", nil, xff(c.xff...)); r.status != c.status {
				t.Errorf("X-Forwarded-For %q: %d, want %d", c.xff, r.status, c.status)
			}
		}
	})
}

func TestLimiterBounded(t *testing.T) {
	l := newLimiter(0.001, 1)
	base := netip.MustParseAddr("2001:db8::").As16()
	for i := range 100_000 {
		a := base
		a[4], a[5], a[6] = byte(i>>16), byte(i>>8), byte(i)
		l.allow(netip.AddrFrom16(a), now())
	}
	if n := l.tracked(); n > maxClients {
		t.Errorf("the limiter holds %d clients, past %d", n, maxClients)
	}
	// The table, full, still limits.
	spent := netip.MustParseAddr("192.0.2.1")
	l.allow(spent, now())
	if ok, _ := l.allow(spent, now()); ok {
		t.Fatal("the bucket of one is not spent after two requests")
	}
}
