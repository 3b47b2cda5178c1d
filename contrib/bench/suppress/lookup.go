package main

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/genropy/postino/backends"
)

// looker is what lookups needs of a store.
type looker interface {
	Suppressed(ctx context.Context, stream string, addrs []string, now time.Time) ([]backends.Suppression, error)
}

type lookupOptions struct {
	n, rcpts, entries int
	hits              float64
}

type lookupResult struct {
	took    []time.Duration
	found   int // entries the lookups returned, all told
	elapsed time.Duration
}

type percentiles struct{ p50, p90, p99, max time.Duration }

func (r lookupResult) percentiles() percentiles {
	s := slices.Clone(r.took)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return percentiles{p50: at(0.50), p90: at(0.90), p99: at(0.99), max: s[len(s)-1]}
}

// lookups times o.n lookups one after the other, as one message's would
// be, for the stream of load.sh's messages: each of o.rcpts addresses no
// entry holds, but in a share o.hits of them one is an entry's (which
// blocks that stream or not, as its scope says).
func lookups(ctx context.Context, s looker, o lookupOptions) (lookupResult, error) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := lookupResult{took: make([]time.Duration, 0, o.n)}
	addrs := make([]string, o.rcpts)
	begin := time.Now()
	for range o.n {
		for j := range addrs {
			addrs[j] = missAddress(rng.IntN(1 << 30))
		}
		if o.entries > 0 && rng.Float64() < o.hits {
			addrs[rng.IntN(len(addrs))] = address(rng.IntN(o.entries))
		}
		start := time.Now()
		found, err := s.Suppressed(ctx, streams[0], addrs, start.UTC())
		r.took = append(r.took, time.Since(start))
		if err != nil {
			return r, err
		}
		r.found += len(found)
	}
	r.elapsed = time.Since(begin)
	return r, nil
}
