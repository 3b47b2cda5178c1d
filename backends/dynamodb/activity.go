package dynamodb

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// The counts per minute of what happens to messages (backends.Throughput)
// are kept in counterShards activity items a minute (Id "_ACTIVITY#n",
// Status the minute as keyTime writes it, so that a shard's minutes sort
// as time), each with a number for every activity: a change adds to the
// activities it counts in one of them, picked at random, in its own
// transaction (counterStmts). An update may only add to a number that
// exists, in an item that exists: the first change of a minute in a store
// makes that minute's items first (ensureMinute), unless another relay
// made them already. Minutes queries the shards at once; PruneMinutes
// deletes the minutes the housekeeping no longer wants.
const activityPrefix = "_ACTIVITY"

func activityKey(shard int, minute time.Time) map[string]types.AttributeValue {
	return itemKey(sharded(activityPrefix, shard), keyTime(minute))
}

// ensureMinute makes the activity items of minute that are not there yet,
// or lack an activity (one made by a relay of an earlier version, which
// did not know it), once a minute in a store: a read of the 16 items, and
// the writes of those missing (ensureNumbers). The callers that come
// meanwhile wait for it.
func (s *Store) ensureMinute(ctx context.Context, minute time.Time) error {
	if s.minute.Load() == minute.Unix() {
		return nil
	}
	s.minuteMu.Lock()
	defer s.minuteMu.Unlock()
	if s.minute.Load() == minute.Unix() {
		return nil
	}
	keys := make([]map[string]types.AttributeValue, counterShards)
	for i := range keys {
		keys[i] = activityKey(i, minute)
	}
	if err := ensureNumbers(ctx, s, keys, backends.Activities()); err != nil {
		return fmt.Errorf("make the activity items of %s: %w", minute.Format(time.RFC3339), err)
	}
	s.minute.Store(minute.Unix())
	return nil
}

// activityMinutes reads, from every shard at once, the activity items of
// the minutes cmp selects against that of t ("<" or ">="), keys only when
// keysOnly.
func (s *Store) activityMinutes(ctx context.Context, cmp string, t time.Time, keysOnly bool) ([]map[string]types.AttributeValue, error) {
	what := "*"
	if keysOnly {
		what = `"Id", "Status"`
	}
	pages := make([][]map[string]types.AttributeValue, counterShards)
	err := eachAtOnce(counterShards, func(i int) error {
		var err error
		pages[i], err = s.query(ctx, "SELECT "+what+" FROM "+s.from("")+` WHERE "Id" = ? AND "Status" `+cmp+` ?`, 0,
			str(sharded(activityPrefix, i)), str(keyTime(backends.MinuteOf(t))))
		return err
	})
	var out []map[string]types.AttributeValue
	for _, p := range pages {
		out = append(out, p...)
	}
	return out, err
}

func (s *Store) Minutes(ctx context.Context, since time.Time) ([]backends.Minute, error) {
	items, err := s.activityMinutes(ctx, ">=", since, false)
	if err != nil {
		return nil, fmt.Errorf("minutes: %w", err)
	}
	tally := backends.Tally{}
	for _, it := range items {
		at, err := time.Parse(keyLayout, getS(it, "Status"))
		if err != nil {
			return nil, fmt.Errorf("minutes: activity item %s %s: %w", getS(it, "Id"), getS(it, "Status"), err)
		}
		for _, a := range backends.Activities() {
			tally.Add(at, a, int(getN(it, string(a))))
		}
	}
	return tally.Minutes(), nil
}

// PruneMinutes deletes the activity items of the minutes before that of
// before. The relay's housekeeping prunes none this recent; should it
// prune the minute this store made sure of, the store makes it again.
func (s *Store) PruneMinutes(ctx context.Context, before time.Time) error {
	if m := s.minute.Load(); m < backends.MinuteOf(before).Unix() {
		s.minute.CompareAndSwap(m, 0)
	}
	items, err := s.activityMinutes(ctx, "<", before, true)
	if err == nil {
		dels := make([]types.WriteRequest, len(items))
		for i, it := range items {
			dels[i] = deleteOf(getS(it, "Id"), getS(it, "Status"))
		}
		err = s.writeItems(ctx, dels)
	}
	if err != nil {
		return fmt.Errorf("prune minutes: %w", err)
	}
	return nil
}
