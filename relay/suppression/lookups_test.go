package suppression

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

// countingStore counts the reads of the list, and fails those of one
// stream.
type countingStore struct {
	Store
	failStream string
	mu         sync.Mutex
	reads      map[string]int
}

func (s *countingStore) Suppressed(ctx context.Context, stream string, addrs []string, now time.Time) ([]backends.Suppression, error) {
	s.mu.Lock()
	s.reads[stream]++
	s.mu.Unlock()
	if stream == s.failStream {
		return nil, errors.New("the store is down")
	}
	return s.Store.Suppressed(ctx, stream, addrs, now)
}

// TestLookupsRead checks a group's read: one read of the list per stream,
// and each caller answered with its own addresses' entries alone.
func TestLookupsRead(t *testing.T) {
	p, s := newPolicy(t)
	defer p.Close()
	ctx := context.Background()
	now := time.Now().UTC()
	for _, addr := range []string{"a@example.net", "b@example.net"} {
		if _, err := p.Unsubscribe(ctx, "news", addr, Evidence{MessageID: "m"}, now); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Hard(ctx, "gone@example.net", Evidence{MessageID: "m"}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Hard(ctx, "gone@example.net", Evidence{MessageID: "m2"}, now); err != nil { // its rule needs two
		t.Fatal(err)
	}
	cs := &countingStore{Store: s, failStream: "broken", reads: map[string]int{}}
	l := newLookups(cs)
	defer l.Close()
	group := []*lookup{
		{stream: "news", keys: []string{"a@example.net", "c@example.net"}, now: now},
		{stream: "news", keys: []string{"b@example.net", "gone@example.net"}, now: now.Add(time.Second)},
		{stream: "news", keys: []string{"c@example.net"}, now: now},
		{stream: Transactional, keys: []string{"a@example.net", "gone@example.net"}, now: now},
		{stream: "broken", keys: []string{"a@example.net"}, now: now},
	}
	errs := l.read(group)
	keysOf := func(q *lookup) []string {
		var keys []string
		for _, e := range q.found {
			keys = append(keys, e.Key)
		}
		slices.Sort(keys)
		return keys
	}
	want := [][]string{{"a@example.net"}, {"b@example.net", "gone@example.net"}, nil, {"gone@example.net"}, nil}
	for i, q := range group {
		if got := keysOf(q); !slices.Equal(got, want[i]) {
			t.Errorf("lookup %d (%s %v): found %v, want %v", i, q.stream, q.keys, got, want[i])
		}
		if wantErr := q.stream == "broken"; (errs[i] != nil) != wantErr {
			t.Errorf("lookup %d: error %v, want one: %v", i, errs[i], wantErr)
		}
	}
	for stream, n := range cs.reads {
		if n != 1 {
			t.Errorf("stream %s read %d times for one group, want once", stream, n)
		}
	}
}

// TestLookupsConcurrent checks callers at once through the committer: each
// gets its own answer, whatever group it fell in.
func TestLookupsConcurrent(t *testing.T) {
	p, _ := newPolicy(t)
	defer p.Close()
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := p.Unsubscribe(ctx, "news", "out@example.net", Evidence{MessageID: "m"}, now); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			addr := "in@example.net"
			if i%2 == 0 {
				addr = "out@example.net"
			}
			got, err := p.Blocking(ctx, "news", []string{addr}, now)
			if err != nil || (len(got) == 1) != (i%2 == 0) {
				t.Errorf("caller %d (%s): %v, %v", i, addr, got, err)
			}
		})
	}
	wg.Wait()
}
