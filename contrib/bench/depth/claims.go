package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/genropy/postino/backends"
)

// claimLimit is the delivery engine's claim: up to 256 at a time.
const claimLimit = 256

type percentiles struct{ p50, p99, max time.Duration }

func summarize(ds []time.Duration) percentiles {
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return percentiles{p50: at(0.50), p99: at(0.99), max: s[len(s)-1]}
}

type claimFigures struct{ empty, one percentiles }

// measureClaims times the delivery engine's claim on the full outbox, with
// the relay not running: first with nothing due (the suspended batch is
// due but held, the rest deferred), then with one message due, which is
// handed back after each claim.
func measureClaims(ctx context.Context, o backends.Outbox, samples int, budget time.Duration) (claimFigures, error) {
	var out claimFigures
	empty, err := timeClaims(ctx, o, samples, budget, 0, nil)
	if err != nil {
		return out, err
	}
	// Its own id each run: a table reused (-reuse) keeps the earlier ones.
	probe := &backends.Message{ID: "depth-probe-" + nonce(), Priority: backends.PriorityNormal, EmlPath: "missing/depth-probe.eml",
		Reason: "accepted from 127.0.0.1", Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{rcpt}}}
	if err := o.Create(ctx, probe); err != nil {
		return out, err
	}
	if err := o.Transition(ctx, backends.Transition{ID: probe.ID, From: backends.StatusAccepted, To: backends.StatusIntaking,
		LeaseUntil: time.Now().Add(time.Minute), Route: route, Then: []backends.Step{{To: backends.StatusReady}}}); err != nil {
		return out, err
	}
	handBack := func(id string) error {
		return o.Transition(ctx, backends.Transition{ID: id, From: backends.StatusProcessing, To: backends.StatusReady,
			KeepReason: true, Reason: "handed back by the benchmark"})
	}
	one, err := timeClaims(ctx, o, samples, budget, 1, handBack)
	if err != nil {
		return out, err
	}
	// The probe has no file: cancel it, so that the relay leaves it alone.
	err = o.Transition(ctx, backends.Transition{ID: probe.ID, From: backends.StatusReady, To: backends.StatusFailed,
		Reason: "cancelled by the benchmark", Then: []backends.Step{{To: backends.StatusCallingFailed}, {To: backends.StatusFailedAcknowledged}}})
	if err != nil {
		return out, err
	}
	out.empty, out.one = summarize(empty), summarize(one)
	fmt.Printf("claims (limit %d, relay stopped, %d and %d samples): nothing due p50 %s p99 %s max %s; one due p50 %s p99 %s max %s\n",
		claimLimit, len(empty), len(one), fmtDur(out.empty.p50), fmtDur(out.empty.p99), fmtDur(out.empty.max),
		fmtDur(out.one.p50), fmtDur(out.one.p99), fmtDur(out.one.max))
	return out, nil
}

// timeClaims times samples claims, or as many as budget allows, each of
// which must return want messages; after each, release gives back what it
// took.
func timeClaims(ctx context.Context, o backends.Outbox, samples int, budget time.Duration, want int, release func(id string) error) ([]time.Duration, error) {
	out := make([]time.Duration, 0, samples)
	deadline := time.Now().Add(budget)
	for i := 0; i < samples && (i == 0 || time.Now().Before(deadline)); i++ {
		now := time.Now().UTC()
		start := time.Now()
		ms, err := o.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now,
			LeaseUntil: now.Add(5 * time.Minute), Limit: claimLimit, Reason: "claimed for delivery by the benchmark"})
		d := time.Since(start)
		if err != nil {
			return nil, err
		}
		if len(ms) != want {
			return nil, fmt.Errorf("a claim took %d messages, want %d: the fill is not as planned", len(ms), want)
		}
		out = append(out, d)
		for _, m := range ms {
			if err := release(m.ID); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// cursors are listing cursors near the end of each listing, found through
// the store before the relay runs, for the admin API's late pages.
type cursors struct{ newest, ready string }

func lateCursors(ctx context.Context, o backends.Outbox, n int) (cursors, error) {
	var c cursors
	var err error
	start := time.Now()
	page := min(50000, max(1000, n/20))
	if c.newest, err = lastCursor(ctx, o, "", page); err != nil {
		return c, err
	}
	if c.ready, err = lastCursor(ctx, o, backends.StatusReady, page); err != nil {
		return c, err
	}
	fmt.Printf("walked both listings through the store to their last pages in %s\n", time.Since(start).Round(10*time.Millisecond))
	return c, nil
}

// lastCursor walks a listing in pages of the given size (the store takes
// any; few pages keep the walk short where a page's cost grows with its
// depth) and returns the cursor of its last page: the admin API's page
// after it is in the listing's last twentieth (or last 1,000 messages).
func lastCursor(ctx context.Context, o backends.Outbox, st backends.Status, page int) (string, error) {
	after := ""
	for {
		_, next, err := o.List(ctx, backends.ListQuery{Status: st, After: after, Limit: page})
		if err != nil {
			return "", err
		}
		if next == "" {
			return after, nil
		}
		after = next
	}
}
