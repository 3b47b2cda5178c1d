package mtasts

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/internal/testrig/dnstest"
	"github.com/genropy/postino/internal/testrig/logtest"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/internal/testrig/testcert"
	"github.com/genropy/postino/internal/testrig/webtest"
	"github.com/genropy/postino/relay/resolver"
)

// policyHost serves example.test's policy at 127.0.0.4 with a certificate
// for mta-sts.example.test, the text and content type the test sets.
type policyHost struct {
	*webtest.Server
	text, ctype atomic.Value
	cert        testcert.Pair
}

func startPolicyHost(t *testing.T) *policyHost {
	h := &policyHost{cert: testcert.New(t, "mta-sts.example.test")}
	h.text.Store("version: STSv1\nmode: enforce\nmx: mx1.example.test\nmx: *.mx.example.test\nmax_age: 86400\n")
	h.ctype.Store("text/plain; charset=utf-8")
	h.Server = webtest.StartTLS(t, "127.0.0.4:0", h.cert.ServerConfig(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/mta-sts.txt":
			if h.text.Load().(string) == "REDIRECT" {
				http.Redirect(w, r, "/moved", http.StatusFound)
				return
			}
			w.Header().Set("Content-Type", h.ctype.Load().(string))
			fmt.Fprint(w, h.text.Load().(string))
		case "/moved":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "version: STSv1\nmode: none\nmax_age: 60\n")
		default:
			http.NotFound(w, r)
		}
	}))
	return h
}

func (h *policyHost) fetches() int {
	n := 0
	for _, r := range h.Requests() {
		if r.Path == "/.well-known/mta-sts.txt" {
			n++
		}
	}
	return n
}

func zone(id string) dnstest.Zone {
	return dnstest.Zone{Records: []string{
		`_mta-sts.example.test. IN TXT "v=STSv1; id=` + id + `"`,
		"mta-sts.example.test. IN A 127.0.0.4",
		`_mta-sts.nopolicy.test. IN TXT "v=spf1 -all"`,
		`_mta-sts.down.test. IN TXT "v=STSv1; id=1"`,
		"mta-sts.down.test. IN A 127.0.0.5",
	}}
}

// TestCache: a policy is fetched once, and served from memory or from
// the store that relays share until it is due again: when the TXT
// record's id changes, or a tenth of its max_age before it expires.
func TestCache(t *testing.T) {
	ctx := context.Background()
	host := startPolicyHost(t)
	dnsSrv := dnstest.Start(t, zone("one"))
	res := resolver.New([]string{dnsSrv.Addr}, resolver.Options{Timeout: 5 * time.Second})
	store := outboxtest.Store(t)
	log, _ := logtest.Logger()
	opts := Options{Roots: host.cert.Pool, Port: host.Port(), Timeout: 10 * time.Second, Recheck: time.Hour}
	a, b := New(opts, res, store, log), New(opts, res, store, log)

	p, err := a.Policy(ctx, "Example.Test.")
	if err != nil || p == nil || p.Mode != ModeEnforce || p.ID != "one" || p.Domain != "example.test" || !p.Match("a.mx.example.test") {
		t.Fatalf("Policy = %+v, %v", p, err)
	}
	for _, c := range []*Cache{a, a, b} {
		if p, err := c.Policy(ctx, "example.test"); err != nil || p == nil || p.ID != "one" {
			t.Fatalf("Policy again = %+v, %v", p, err)
		}
	}
	if n := host.fetches(); n != 1 {
		t.Errorf("%d fetches for two relays sharing a store, want 1", n)
	}

	// A new id is a new policy, once the TXT record is asked again.
	dnsSrv.Set(t, zone("two"))
	host.text.Store("version: STSv1\nmode: testing\nmx: mx1.example.test\nmax_age: 86400\n")
	a.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if p, err := a.Policy(ctx, "example.test"); err != nil || p.ID != "two" || p.Mode != ModeTesting {
		t.Errorf("after the id changed: %+v, %v", p, err)
	}
	if n := host.fetches(); n != 2 {
		t.Errorf("%d fetches after the id changed, want 2", n)
	}
	// Near its expiry a policy is fetched again; b then finds it in the
	// store.
	late := func() time.Time { return time.Now().Add(25 * time.Hour) }
	a.now, b.now = late, late
	if p, err := a.Policy(ctx, "example.test"); err != nil || p.ID != "two" {
		t.Errorf("near the expiry: %+v, %v", p, err)
	}
	if p, err := b.Policy(ctx, "example.test"); err != nil || p.ID != "two" || p.Mode != ModeTesting {
		t.Errorf("the other relay near the expiry: %+v, %v", p, err)
	}
	if n := host.fetches(); n != 3 {
		t.Errorf("%d fetches after the refresh, want 3", n)
	}

	// No MTA-STS record: no policy, no error.
	if p, err := a.Policy(ctx, "nopolicy.test"); p != nil || err != nil {
		t.Errorf("nopolicy.test: %+v, %v", p, err)
	}
	// A policy announced that cannot be fetched.
	var fe *FetchError
	if p, err := a.Policy(ctx, "down.test"); p != nil || !errors.As(err, &fe) || fe.Result != ResultFetchError {
		t.Errorf("down.test: %+v, %v; want a %s", p, err, ResultFetchError)
	}
}

// TestFetch: what RFC 8461 section 3.3 asks of the policy host.
func TestFetch(t *testing.T) {
	ctx := context.Background()
	host := startPolicyHost(t)
	res := resolver.New([]string{dnstest.Start(t, zone("one")).Addr}, resolver.Options{Timeout: 5 * time.Second})
	log, _ := logtest.Logger()
	stranger := testcert.New(t, "mta-sts.example.test")
	tests := []struct {
		name   string
		opts   Options
		ctype  string
		text   string
		result string
		says   string
	}{
		{name: "an unknown authority", opts: Options{Roots: stranger.Pool}, result: ResultWebPKIInvalid, says: "certificate"},
		{name: "text/html", ctype: "text/html", result: ResultPolicyInvalid, says: `content type "text/html"`},
		{name: "too large", text: strings.Repeat("x", maxPolicy+1), result: ResultPolicyInvalid, says: "over 65536 bytes"},
		{name: "a redirect", text: "REDIRECT", result: ResultFetchError, says: "redirects, which RFC 8461 forbids"},
		{name: "not a policy", text: "hello", result: ResultPolicyInvalid, says: "not key: value"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			if opts.Roots == nil {
				opts.Roots = host.cert.Pool
			}
			opts.Port, opts.Timeout, opts.Recheck = host.Port(), 10*time.Second, time.Hour
			host.ctype.Store(cmp(tt.ctype, "text/plain"))
			host.text.Store(cmp(tt.text, "version: STSv1\nmode: none\nmax_age: 60\n"))
			_, err := New(opts, res, outboxtest.Store(t), log).fetch(ctx, "example.test")
			var fe *FetchError
			if !errors.As(err, &fe) || fe.Result != tt.result || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("%v, want a %s saying %q", err, tt.result, tt.says)
			}
		})
	}
}

func cmp(s, or string) string {
	if s == "" {
		return or
	}
	return s
}
