package dynamodb_test

import (
	"context"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

// BenchmarkClaim times the delivery engine's claim (256 at a time) on a
// queue of 400 READY messages, a hundred a priority, none due but those
// the case makes due, and reports the requests each claim costs and the
// entries its queries read: what the depth benchmark's claim target (p99
// under 20 ms) rests on.
func BenchmarkClaim(b *testing.B) {
	for _, bc := range []struct {
		name string
		due  int
	}{{"nothing-due", 0}, {"one-due", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			opts := freshTable(b, 0)
			counter := counted(&opts)
			s := openStore(b, opts)
			now := time.Now().UTC()
			for p := backends.PriorityImmediate; p <= backends.PriorityLow; p++ {
				makeReady(b, s, "later-"+string(rune('0'+p)), 100, p, now.Add(time.Hour), "")
			}
			makeReady(b, s, "due", bc.due, backends.PriorityNormal, now.Add(-time.Minute), "")
			counter.reset()
			b.ResetTimer()
			for b.Loop() {
				got, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing,
					Now: now, LeaseUntil: now.Add(time.Minute), Limit: 256, Reason: "claimed by the benchmark"})
				if err != nil || len(got) != bc.due {
					b.Fatalf("claimed %d, %v; want %d", len(got), err, bc.due)
				}
				for _, m := range got {
					if err := s.Transition(ctx, backends.Transition{ID: m.ID, From: backends.StatusProcessing,
						To: backends.StatusReady, KeepReason: true}); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			calls, _ := counter.total()
			b.ReportMetric(float64(calls)/float64(b.N), "requests/op")
			b.ReportMetric(float64(counter.entries())/float64(b.N), "entries/op")
		})
	}
}

// BenchmarkCounts times the counts by status (/v1/stats) and reports
// their requests.
func BenchmarkCounts(b *testing.B) {
	ctx := context.Background()
	opts := freshTable(b, 0)
	counter := counted(&opts)
	s := openStore(b, opts)
	makeReady(b, s, "m", 50, backends.PriorityNormal, time.Now(), "")
	counter.reset()
	for b.Loop() {
		if _, err := s.Counts(ctx); err != nil {
			b.Fatal(err)
		}
	}
	calls, _ := counter.total()
	b.ReportMetric(float64(calls)/float64(b.N), "requests/op")
}

// BenchmarkRenew times the renewal of the leases of 100 messages held,
// the most one renewal names (backends.MaxRenewal).
func BenchmarkRenew(b *testing.B) {
	ctx := context.Background()
	s := openStore(b, freshTable(b, 0))
	now := time.Now().UTC()
	makeReady(b, s, "held", backends.MaxRenewal, backends.PriorityNormal, now.Add(-time.Minute), "")
	held := now.Add(time.Minute)
	ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing,
		Now: now, LeaseUntil: held, Limit: backends.MaxRenewal})
	if err != nil || len(ms) != backends.MaxRenewal {
		b.Fatalf("claimed %d, %v", len(ms), err)
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	for b.Loop() {
		until := held.Add(time.Second)
		got, err := s.Renew(ctx, backends.Renewal{IDs: ids, Status: backends.StatusProcessing, Held: held, Until: until})
		if err != nil || len(got) != len(ids) {
			b.Fatalf("renewed %d, %v", len(got), err)
		}
		held = until
	}
}
