package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
)

// A filled list holds every entry, of every reason, and the lookups find
// the listed recipients that block the load's stream and nothing else.
func TestFillThenLookup(t *testing.T) {
	ctx := context.Background()
	s, err := bolt.Open(filepath.Join(t.TempDir(), "outbox.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const n = 2000
	if _, err := fill(ctx, s, n, time.Now().UTC()); err != nil {
		t.Fatal(err)
	}
	counts, err := s.SuppressionCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, r := range backends.SuppressionReasons() {
		if counts[r] == 0 {
			t.Errorf("no entry of reason %s: %v", r, counts)
		}
		total += counts[r]
	}
	if total != n {
		t.Errorf("%d entries, want %d", total, n)
	}

	miss, err := lookups(ctx, s, lookupOptions{n: 200, rcpts: 5, entries: n, hits: 0})
	if err != nil {
		t.Fatal(err)
	}
	if miss.found != 0 || len(miss.took) != 200 {
		t.Errorf("misses only: %d lookups found %d entries, want 200 and 0", len(miss.took), miss.found)
	}
	hit, err := lookups(ctx, s, lookupOptions{n: 1000, rcpts: 5, entries: n, hits: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Of the entries, 70 % block every stream and 15 % the load's: a hit in
	// every lookup finds about 850.
	if hit.found < 780 || hit.found > 920 {
		t.Errorf("a listed recipient in each of 1000 lookups found %d entries, want about 850", hit.found)
	}
}
