package suppression

import (
	"context"
	"slices"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/groupcommit"
)

// lookups gathers the lookups of concurrent callers (the intake worker
// checks many messages at once, each session its RCPTs) into one read of
// the list per stream: on a SQL store, a round trip and a statement's
// fixed cost are most of a lookup, whatever the list holds. A lone caller
// never waits for company; while one read runs, the next group gathers.
type lookups struct {
	store Store
	c     *groupcommit.Committer[*lookup]
}

// lookup is one caller's question, and where its answer goes.
type lookup struct {
	stream string
	keys   []string
	now    time.Time
	found  []backends.Suppression
}

// maxLookups bounds a group: a read of a few thousand keys stays one
// statement of reasonable size.
const maxLookups = 256

func newLookups(store Store) *lookups {
	l := &lookups{store: store}
	l.c = groupcommit.New(groupcommit.Config{Max: maxLookups}, l.read)
	return l
}

// Suppressed is Store.Suppressed, read together with the concurrent
// callers' lookups.
func (l *lookups) Suppressed(ctx context.Context, stream string, addrs []string, now time.Time) ([]backends.Suppression, error) {
	q := &lookup{stream: stream, keys: backends.SuppressionKeys(addrs), now: now}
	if len(q.keys) == 0 {
		return nil, nil
	}
	if err := l.c.Do(ctx, q); err != nil {
		return nil, err
	}
	return q.found, nil
}

// read answers a group: one read per stream for the keys of all its
// lookups, at the earliest of their times (an entry that expired between
// them still holds its caller back, as it would have a moment before).
func (l *lookups) read(group []*lookup) []error {
	errs := make([]error, len(group))
	byStream := map[string][]int{}
	for i, q := range group {
		byStream[q.stream] = append(byStream[q.stream], i)
	}
	for stream, members := range byStream {
		var keys []string
		now := group[members[0]].now
		for _, i := range members {
			keys = append(keys, group[i].keys...)
			if group[i].now.Before(now) {
				now = group[i].now
			}
		}
		entries, err := l.store.Suppressed(context.Background(), stream, keys, now)
		for _, i := range members {
			q := group[i]
			if errs[i] = err; err != nil {
				continue
			}
			for _, e := range entries {
				if slices.Contains(q.keys, e.Key) {
					q.found = append(q.found, e)
				}
			}
		}
	}
	return errs
}

// Close ends the reads once the lookups handed over are answered.
func (l *lookups) Close() { l.c.Close() }
