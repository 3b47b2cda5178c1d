package tlsrpt

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/genropy/postino/internal/testrig/dnstest"
	"github.com/genropy/postino/internal/testrig/logtest"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/internal/testrig/testcert"
	"github.com/genropy/postino/internal/testrig/webtest"
	"github.com/genropy/postino/relay/resolver"
)

// TestFleet: two relays count into one store, each under its own rows;
// one restarts and keeps its earlier counts; the report of the window is
// sent once, by the relay holding the lease, with the fleet's sums.
func TestFleet(t *testing.T) {
	ctx := context.Background()
	store := outboxtest.Store(t)
	log, _ := logtest.Logger()
	cert := testcert.New(t, "127.0.0.6")
	posts := webtest.StartTLS(t, "127.0.0.6:0", cert.ServerConfig(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	dns := dnstest.Start(t, dnstest.Zone{Records: []string{
		fmt.Sprintf(`_smtp._tls.example.test. IN TXT "v=TLSRPTv1; rua=https://127.0.0.6:%d/r"`, posts.Port()),
	}})
	res := resolver.New([]string{dns.Addr}, resolver.Options{Timeout: 5 * time.Second})
	// Two days ago: the store keeps the counts by its own clock.
	window := time.Now().UTC().Truncate(24 * time.Hour).Add(-48 * time.Hour)
	during := func() time.Time { return window.Add(time.Hour) }
	after := func() time.Time { return window.Add(25*time.Hour + time.Minute) }
	sts := Policy{Type: TypeSTS, Domain: "example.test", String: []string{"version: STSv1", "mode: enforce"}, MXHost: []string{"mx.example.test"}}

	a, b := NewTally("relay-a", 24*time.Hour, store, log), NewTally("relay-b", 24*time.Hour, store, log)
	a.now, b.now = during, during
	a.Count(Session{Policy: sts})
	a.Count(Session{Policy: sts, Result: ResultExpired, MXHost: "mx.example.test", ReceivingIP: "192.0.2.1"})
	b.Count(Session{Policy: sts})
	for _, tl := range []*Tally{a, b} {
		if err := tl.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// relay-a restarts: its new tally adds to what it wrote before.
	a = NewTally("relay-a", 24*time.Hour, store, log)
	a.now = during
	a.Count(Session{Policy: sts, Result: ResultExpired, MXHost: "mx.example.test", ReceivingIP: "192.0.2.1"})
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	opts := Options{Organization: "Org", Contact: "tls@example.org", Period: 24 * time.Hour, Delay: time.Hour,
		Lease: 10 * time.Minute, Roots: cert.Pool, Timeout: 10 * time.Second}
	ra, rb := opts, opts
	ra.Owner, rb.Owner = "relay-a", "relay-b"
	repA, repB := NewReporter(ra, store, a, res, nil, log), NewReporter(rb, store, b, res, nil, log)
	repA.now, repB.now = after, after
	for _, r := range []*Reporter{repA, repB, repA} {
		if err := r.Once(ctx); err != nil {
			t.Fatal(err)
		}
	}
	reqs := posts.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d reports posted, want 1", len(reqs))
	}
	zr, err := gzip.NewReader(bytes.NewReader(reqs[0].Body))
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.NewDecoder(zr).Decode(&rep); err != nil {
		t.Fatal(err)
	}
	if reqs[0].ContentType != "application/tlsrpt+gzip" || len(rep.Policies) != 1 || !rep.DateRange.Start.Equal(window) ||
		rep.DateRange.End.Before(window.Add(24*time.Hour-time.Second)) {
		t.Fatalf("report %+v, posted as %s", rep, reqs[0].ContentType)
	}
	p := rep.Policies[0]
	if p.Summary != (Summary{Success: 2, Failure: 2}) || len(p.Failures) != 1 || p.Failures[0].Count != 2 ||
		p.Failures[0].ResultType != ResultExpired || p.Policy.Domain != "example.test" {
		t.Errorf("policy counts %+v", p)
	}
}
