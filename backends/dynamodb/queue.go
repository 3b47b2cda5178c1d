package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// change is a transition prepared against the _META item as read.
type change struct {
	stmts []types.ParameterizedStatement
	m     *meta
}

// prepare applies t to m (read in t.From) and makes the statements.
func (s *Store) prepare(m *meta, t backends.Transition) (*change, error) {
	readStatus, readSeq, hadSeq := m.msg.Status, m.seq, m.hasSeq
	msg := &m.msg
	t.Apply(msg, t.Final())
	// A message held for its batch and delivered is held no more: should an
	// operator send it again, a claim holds it again if the batch still is
	// suspended.
	m.held = m.held && msg.Status.Undelivered()
	ttl := s.ttlFor(t.At)
	if ttl != nil {
		msg.TTL = ttl
	} else if m.ttl != nil {
		// Kept at the root: the seed's writer kept it in Attributes, which
		// the write replaces.
		ttl = m.ttl
	}
	var items []map[string]types.AttributeValue
	for i, st := range t.Steps() {
		m.seq++
		m.reached[string(st.To)]++
		var details []byte
		if i == 0 {
			details = t.Details
		}
		items = append(items, s.statusItem(msg.ID, st.To, m.reached[string(st.To)], m.seq, st.Reason, t.At, details, ttl))
	}
	var events []types.ParameterizedStatement
	if t.Event != nil {
		e := *t.Event
		var err error
		if events, err = s.eventInserts(m, &e, t.At, ttl); err != nil {
			return nil, err
		}
		*t.Event = e
	}
	var alarm []types.ParameterizedStatement
	if t.Alarm != nil {
		alarm = append(alarm, s.alarmStmt(m, *t.Alarm)) // before the _META item is written: it records the alarm
	}
	c := &change{m: m, stmts: []types.ParameterizedStatement{s.metaUpdate(m, readStatus, readSeq, hadSeq, ttl)}}
	for _, it := range items {
		c.stmts = append(c.stmts, s.insert(it))
	}
	c.stmts = append(c.stmts, events...)
	c.stmts = append(c.stmts, alarm...)
	return c, nil
}

// transition reads, prepares and commits t, again when another writer
// changed the message but left it in t.From. A message this store wrote
// last is not read first: the write's condition on its revision tells
// whether it changed since.
func (s *Store) transition(ctx context.Context, t backends.Transition) (*backends.Message, error) {
	for attempt := 1; ; attempt++ {
		// A copy remembered may be stale (a Renew, or another relay, wrote
		// since): one that does not hold as t says is read again, since
		// only the read proves the message lost to its holder.
		m, ok := s.recent.take(t.ID)
		if !ok || attempt > 1 || !t.Holds(&m.msg) {
			var err error
			if m, err = s.getMeta(ctx, t.ID); err != nil {
				return nil, err
			}
			// The seed's writer kept no count of the statuses reached:
			// its items say them, lest a new one collide with them.
			if !m.hasSeq {
				if _, err := s.readReached(ctx, m); err != nil {
					return nil, err
				}
			}
		}
		if !t.Holds(&m.msg) {
			return nil, backends.ErrLockNotAcquired
		}
		c, err := s.prepare(m, t)
		if err != nil {
			return nil, err
		}
		var moved backends.Changes
		moved.Moved(&t)
		counters, err := s.counterStmts(ctx, &moved)
		if err != nil {
			return nil, err
		}
		_, err = s.txn(ctx, append(c.stmts, counters...))
		if errors.Is(err, errCondition) && attempt < 10 {
			continue
		}
		if err != nil {
			return nil, err
		}
		s.recent.remember(c.m)
		return &c.m.msg, nil
	}
}

func (s *Store) Transition(ctx context.Context, t backends.Transition) error {
	if err := t.Prepare(time.Now().UTC()); err != nil {
		return err
	}
	if _, err := s.transition(ctx, t); err != nil {
		return fmt.Errorf("message %s %s to %s: %w", t.ID, t.From, t.To, err)
	}
	return nil
}

// lowKey is below every QueueKey (a key may not be empty).
const lowKey = "!"

// queued reads the QueueIndex entries of one partition between two keys,
// in order, up to limit (0: all).
func (s *Store) queued(ctx context.Context, queue, from, to string, limit int) ([]map[string]types.AttributeValue, error) {
	var (
		out   []map[string]types.AttributeValue
		start map[string]types.AttributeValue
	)
	for {
		page, next, err := s.queuePage(ctx, queue, from, to, limit-len(out), start)
		out = append(out, page...)
		if err != nil || next == nil || (limit > 0 && len(out) >= limit) {
			return out, err
		}
		start = next
	}
}

// queuePage reads one page of QueueIndex entries of a partition between
// two keys, from start (nil: the first), of up to limit (0 or less: as
// many as a page holds), and the key to go on from (nil at the end). It
// is a Query, not a PartiQL SELECT: DynamoDB Local reads the whole
// partition for a SELECT's key range, and a claim behind 12,000 messages
// not due took seconds.
func (s *Store) queuePage(ctx context.Context, queue, from, to string, limit int, start map[string]types.AttributeValue) (
	[]map[string]types.AttributeValue, map[string]types.AttributeValue, error) {
	in := &dynamodb.QueryInput{TableName: aws.String(s.table), IndexName: aws.String("QueueIndex"),
		KeyConditionExpression:    aws.String("#q = :q AND QueueKey BETWEEN :lo AND :hi"),
		ExpressionAttributeNames:  map[string]string{"#q": "Queue"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":q": str(queue), ":lo": str(from), ":hi": str(to)},
		ExclusiveStartKey:         start}
	if limit > 0 {
		in.Limit = aws.Int32(int32(limit))
	}
	resp, err := s.db.Query(ctx, in)
	if err != nil {
		return nil, nil, err
	}
	return resp.Items, resp.LastEvaluatedKey, nil
}

// queuedShards reads a queue (a status, say) from every shard at once,
// between two keys, up to limit of each (0: all), merged in key order and
// cut to limit.
func (s *Store) queuedShards(ctx context.Context, queue, from, to string, limit int) ([]map[string]types.AttributeValue, error) {
	pages := make([][]map[string]types.AttributeValue, shards)
	err := eachAtOnce(shards, func(i int) error {
		var err error
		pages[i], err = s.queued(ctx, sharded(queue, i), from, to, limit)
		return err
	})
	out := mergeBy(pages, "QueueKey", true)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, err
}

// eachMerged hands fn the entries of a sharded queue between two keys in
// key order, reading each shard page by page as the merge needs it (the
// first pages at once), until fn says no more.
func (s *Store) eachMerged(ctx context.Context, queue, from, to string, fn func(map[string]types.AttributeValue) (bool, error)) error {
	type cursor struct {
		items []map[string]types.AttributeValue
		next  map[string]types.AttributeValue
		done  bool
	}
	cs := make([]cursor, shards)
	read := func(i int) error {
		items, next, err := s.queuePage(ctx, sharded(queue, i), from, to, 0, cs[i].next)
		if err != nil {
			return err
		}
		cs[i] = cursor{items: items, next: next, done: next == nil}
		return nil
	}
	if err := eachAtOnce(shards, read); err != nil {
		return err
	}
	for {
		best := -1
		for i := range cs {
			for len(cs[i].items) == 0 && !cs[i].done {
				if err := read(i); err != nil {
					return err
				}
			}
			if len(cs[i].items) > 0 && (best < 0 || getS(cs[i].items[0], "QueueKey") < getS(cs[best].items[0], "QueueKey")) {
				best = i
			}
		}
		if best < 0 {
			return nil
		}
		it := cs[best].items[0]
		cs[best].items = cs[best].items[1:]
		if more, err := fn(it); err != nil || !more {
			return err
		}
	}
}

// mergeBy merges pages, each in order of the string attribute key, into
// one in that order.
func mergeBy(pages [][]map[string]types.AttributeValue, key string, ascending bool) []map[string]types.AttributeValue {
	var out []map[string]types.AttributeValue
	for _, p := range pages {
		out = append(out, p...)
	}
	slices.SortStableFunc(out, func(a, b map[string]types.AttributeValue) int {
		if ascending {
			return strings.Compare(getS(a, key), getS(b, key))
		}
		return strings.Compare(getS(b, key), getS(a, key))
	})
	return out
}

// queryParts runs the query in once for each partition of parts (the
// value of its :p), all at once, each up to limit items that pass its
// filter (0: all), and merges them in the order of the string attribute
// by, the query's order, cut to limit.
func (s *Store) queryParts(ctx context.Context, in *dynamodb.QueryInput, parts []string, by string, limit int) ([]map[string]types.AttributeValue, error) {
	pages := make([][]map[string]types.AttributeValue, len(parts))
	err := eachAtOnce(len(parts), func(i int) error {
		q := *in
		q.TableName = aws.String(s.table)
		q.ExpressionAttributeValues = map[string]types.AttributeValue{":p": str(parts[i])}
		maps.Copy(q.ExpressionAttributeValues, in.ExpressionAttributeValues)
		for {
			if limit > 0 {
				q.Limit = aws.Int32(int32(limit - len(pages[i])))
			}
			resp, err := s.db.Query(ctx, &q)
			if err != nil {
				return err
			}
			pages[i] = append(pages[i], resp.Items...)
			if resp.LastEvaluatedKey == nil || limit > 0 && len(pages[i]) >= limit {
				return nil
			}
			q.ExclusiveStartKey = resp.LastEvaluatedKey
		}
	})
	out := mergeBy(pages, by, in.ScanIndexForward == nil || *in.ScanIndexForward)
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, err
}

// shardsOf are the partitions of key's shards.
func shardsOf(key string) []string {
	out := make([]string, shards)
	for i := range out {
		out[i] = sharded(key, i)
	}
	return out
}

// prioritized reports whether a status's QueueKey starts with the
// priority (see queueKey).
func prioritized(st backends.Status) bool {
	return st == backends.StatusAccepted || st == backends.StatusReady
}

// dueIndex orders the messages of the statuses claims take from by the
// time they are due (dueKey), in the partitions of QueueIndex.
const dueIndex = "DueIndex"

// claimable reads up to n messages that c may take from every shard, in
// claim order. A status ordered by priority is read in DueIndex, a query a
// shard, which reads its due messages and none other, whatever the
// messages not due yet and whatever their priorities; a shard with more
// due than that read is read again in claim order (claimOrder), in a
// second round, and read so at once by the next claims, until it has
// fewer due than they read (Store.backlog).
func (s *Store) claimable(ctx context.Context, c backends.Claim, n int) ([]map[string]types.AttributeValue, error) {
	if !prioritized(c.From) {
		return s.queuedShards(ctx, string(c.From), lowKey, keyTime(c.Now)+"~", n)
	}
	backlog := &s.backlog[0]
	if c.From == backends.StatusReady {
		backlog = &s.backlog[1]
	}
	read := make([][]map[string]types.AttributeValue, shards)
	inOrder := func(i int) error {
		var err error
		read[i], err = s.claimOrder(ctx, sharded(string(c.From), i), c.Now, n)
		backlog[i].Store(err == nil && len(read[i]) >= n)
		return err
	}
	more := make([]bool, shards) // the shard has more due than DueIndex gave
	err := eachAtOnce(shards, func(i int) error {
		if backlog[i].Load() {
			return inOrder(i)
		}
		var err error
		read[i], more[i], err = s.dueFirst(ctx, sharded(string(c.From), i), c.Now, n)
		return err
	})
	if err != nil {
		return nil, err
	}
	err = eachAtOnce(shards, func(i int) error {
		if !more[i] {
			return nil
		}
		return inOrder(i)
	})
	return mergeBy(read, "QueueKey", true), err
}

// dueFirst reads up to n due entries of a shard of a prioritized queue in
// DueIndex, the first due first, and whether it has more. It asks for one
// more than n: a query stopped at its limit gives a key to go on from even
// when nothing is left, and a shard with exactly n due is no backlog. A
// query that stopped short of its limit with a key to go on from met
// DynamoDB's size bound on a page (1 MB), and has more.
func (s *Store) dueFirst(ctx context.Context, queue string, now time.Time, n int) ([]map[string]types.AttributeValue, bool, error) {
	resp, err := s.db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(s.table), IndexName: aws.String(dueIndex),
		KeyConditionExpression:    aws.String("#q = :q AND DueKey <= :now"),
		ExpressionAttributeNames:  map[string]string{"#q": "Queue"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":q": str(queue), ":now": str(keyTime(now) + "~")},
		Limit:                     aws.Int32(int32(n + 1))})
	if err != nil {
		return nil, false, err
	}
	if len(resp.Items) > n {
		return resp.Items[:n], true, nil
	}
	return resp.Items, resp.LastEvaluatedKey != nil, nil
}

// claimOrder reads the first n due entries of a shard of a prioritized
// queue in claim order (QueueIndex): from the first priority on, until an
// entry not due; then the due ones of each later priority, at once.
func (s *Store) claimOrder(ctx context.Context, queue string, now time.Time, n int) ([]map[string]types.AttributeValue, error) {
	// due[p] is the last key of priority p's due messages.
	var due [backends.PriorityLow + 1]string
	for p := range due {
		due[p] = fmt.Sprintf("%d#%s~", p, keyTime(now))
	}
	head, met, err := s.dueHead(ctx, queue, n, due)
	if err != nil {
		return nil, err
	}
	read := make([][]map[string]types.AttributeValue, len(due))
	read[0] = head
	err = eachAtOnce(len(due)-1-met, func(i int) error {
		p := met + 1 + i
		var err error
		read[p], err = s.queued(ctx, queue, fmt.Sprintf("%d#", p), due[p], n)
		return err
	})
	return mergeBy(read, "QueueKey", true), err
}

// dueHead reads the due entries of a prioritized queue from the first
// priority on, up to n, until one not due yet (due holds each priority's
// last due key); it returns them, and the priority of the entry not due
// (PriorityLow when there was none: nothing is left to read).
func (s *Store) dueHead(ctx context.Context, queue string, n int, due [backends.PriorityLow + 1]string) ([]map[string]types.AttributeValue, int, error) {
	var (
		out   []map[string]types.AttributeValue
		start map[string]types.AttributeValue
	)
	lo, hi := fmt.Sprintf("%d#", backends.PriorityImmediate), due[backends.PriorityLow]
	for {
		page, next, err := s.queuePage(ctx, queue, lo, hi, n-len(out), start)
		if err != nil {
			return out, backends.PriorityLow, err
		}
		for j, it := range page {
			k := getS(it, "QueueKey")
			if p := int(k[0] - '0'); k > due[p] {
				return append(out, page[:j]...), p, nil
			}
		}
		out = append(out, page...)
		if next == nil || len(out) >= n {
			return out, backends.PriorityLow, nil
		}
		start = next
	}
}

// perTxn is how many messages a batch writes in one transaction: two
// statements each (the _META item and the new status item), beside the
// counters, within DynamoDB's 100.
const perTxn = 45

// batch writes, for messages as an index read them, what apply makes of
// each (statements, and what the counters gain), up to perTxn messages a
// transaction. A message refused by its condition, because it changed
// since the index was read, is left out and the others go again. It
// returns the messages written that apply kept, as apply left them.
func (s *Store) batch(ctx context.Context, items []map[string]types.AttributeValue,
	apply func(m *meta, c *backends.Changes) (stmts []types.ParameterizedStatement, keep bool, err error)) ([]*backends.Message, error) {
	var out []*backends.Message
	for len(items) > 0 {
		chunk := items[:min(perTxn, len(items))]
		items = items[len(chunk):]
		for len(chunk) > 0 {
			var (
				stmts []types.ParameterizedStatement
				ends  []int // the end of each message's statements
				kept  []*meta
			)
			var moved backends.Changes
			for _, it := range chunk {
				m, err := metaFromItem(it)
				if err != nil {
					return out, err
				}
				st, keep, err := apply(m, &moved)
				if err != nil {
					return out, err
				}
				stmts = append(stmts, st...)
				ends = append(ends, len(stmts))
				if keep {
					kept = append(kept, m)
				}
			}
			counters, err := s.counterStmts(ctx, &moved)
			if err != nil {
				return out, err
			}
			refused, err := s.txnRefused(ctx, append(stmts, counters...))
			if len(refused) == 0 {
				if err != nil {
					return out, err
				}
				for _, m := range kept {
					s.recent.remember(m)
					out = append(out, &m.msg)
				}
				break
			}
			gone := map[int]bool{}
			for _, r := range refused {
				i, _ := slices.BinarySearch(ends, r.index+1)
				if i == len(chunk) {
					return out, fmt.Errorf("counter refused: %w", err)
				}
				gone[i] = true
			}
			var rest []map[string]types.AttributeValue
			for i, it := range chunk {
				if !gone[i] {
					rest = append(rest, it)
				}
			}
			chunk = rest
		}
	}
	return out, nil
}

// Claim reads the first messages of every shard at once, and claims them
// in claim order, a transaction for up to perTxn of them: claimers racing
// for the first ones see those refused and go on with the next. A READY
// message of a suspended batch that is not held yet (it became READY as
// the batch was suspended) is held by the same transaction, so that no
// claim reads it again.
func (s *Store) Claim(ctx context.Context, c backends.Claim) ([]*backends.Message, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Limit <= 0 {
		return nil, nil
	}
	cands, err := s.claimable(ctx, c, c.Limit+4)
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", c.From, err)
	}
	// The suspended batches are read only when a candidate is of a batch:
	// most claims find none due, or none of a batch.
	var suspended []string
	if c.From == backends.StatusReady && slices.ContainsFunc(cands, func(it map[string]types.AttributeValue) bool {
		return getS(getM(it, "Attributes"), "Batch") != ""
	}) {
		if suspended, err = s.SuspendedBatches(ctx); err != nil {
			return nil, fmt.Errorf("claim %s: %w", c.From, err)
		}
	}
	held := func(batch string) bool { return batch != "" && slices.Contains(suspended, batch) }
	apply := func(m *meta, moved *backends.Changes) ([]types.ParameterizedStatement, bool, error) {
		if held(m.msg.Batch) {
			return []types.ParameterizedStatement{s.holdUpdate(m, true)}, false, nil
		}
		t := c.Move(m.msg.ID)
		ch, err := s.prepare(m, t)
		moved.Moved(&t)
		return ch.stmts, true, err
	}
	var out []*backends.Message
	for len(out) < c.Limit && len(cands) > 0 {
		var chunk []map[string]types.AttributeValue
		wanted := 0
		for ; len(cands) > 0 && wanted < c.Limit-len(out) && len(chunk) < perTxn; cands = cands[1:] {
			chunk = append(chunk, cands[0])
			if !held(getS(getM(cands[0], "Attributes"), "Batch")) {
				wanted++
			}
		}
		got, err := s.batch(ctx, chunk, apply)
		out = append(out, got...)
		if err != nil {
			return out, fmt.Errorf("claim %s: %w", c.From, err)
		}
		if len(got) < wanted && len(cands) > 1 {
			// Other claimers are taking the first ones, and will take the
			// next ones as well: go on from further along.
			off := rand.N(len(cands))
			cands = append(cands[off:], cands[:off]...)
		}
	}
	return out, nil
}

// Restore reads the expired leases of every working status from every
// shard, and moves them back in batches.
func (s *Store) Restore(ctx context.Context, expiredBefore time.Time) (int, error) {
	total := 0
	now := time.Now().UTC()
	for _, st := range backends.WorkingStatuses() {
		items, err := s.queuedShards(ctx, string(st), lowKey, keyTime(expiredBefore), 0)
		if err != nil {
			return total, fmt.Errorf("restore: %w", err)
		}
		got, err := s.batch(ctx, items, func(m *meta, moved *backends.Changes) ([]types.ParameterizedStatement, bool, error) {
			if m.msg.Status != st || !m.msg.LeaseUntil.Before(expiredBefore) {
				return nil, false, nil
			}
			t := backends.RestoreTransition(&m.msg, now)
			ch, err := s.prepare(m, t)
			moved.Moved(&t)
			return ch.stmts, true, err
		})
		total += len(got)
		if err != nil {
			return total, fmt.Errorf("restore: %w", err)
		}
	}
	if err := s.sweepActivated(ctx); err != nil {
		return total, fmt.Errorf("restore: %w", err)
	}
	if err := s.sweepSpooling(ctx, now); err != nil {
		return total, fmt.Errorf("restore: %w", err)
	}
	n, err := s.restoreEvents(ctx, expiredBefore, now)
	return total + n, err
}

func (s *Store) Purge(ctx context.Context, cutoff time.Time, limit int) ([]*backends.Message, error) {
	var out []*backends.Message
	for _, st := range backends.AcknowledgedStatuses() {
		if len(out) >= limit {
			break
		}
		items, err := s.queuedShards(ctx, string(st), lowKey, keyTime(cutoff), limit-len(out))
		if err != nil {
			return out, fmt.Errorf("purge: %w", err)
		}
		for _, it := range items {
			if len(out) >= limit {
				break
			}
			m, err := metaFromItem(it)
			if err != nil {
				return out, err
			}
			if !m.msg.UpdatedAt.Before(cutoff) {
				continue
			}
			ok, err := s.remove(ctx, m, st, getN(it, "BodyChunks"))
			if err != nil {
				return out, fmt.Errorf("purge: %w", err)
			}
			if ok {
				out = append(out, &m.msg)
			}
		}
	}
	return out, nil
}

// remove deletes a message's items: the _META item first, on condition that
// it is still as read (in status st, at its revision: a receipt recorded
// since changes it, and would be left behind), then the others (history,
// events, the events' references, its bytes), which are of no use without
// it, 25 to a request. Its bytes, which sort after _META, are deleted by
// their keys, unread.
func (s *Store) remove(ctx context.Context, m *meta, st backends.Status, chunks int64) (bool, error) {
	var gone backends.Changes
	gone.Count(st, -1)
	counters, err := s.counterStmts(ctx, &gone)
	if err != nil {
		return false, err
	}
	where, params := s.metaAsRead(m.msg.ID, st, m.seq, m.hasSeq)
	_, err = s.txn(ctx, append([]types.ParameterizedStatement{stmt("DELETE FROM "+s.from("")+where, params...)}, counters...))
	if errors.Is(err, errCondition) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	items, err := s.query(ctx, "SELECT * FROM "+s.from("")+` WHERE "Id" = ? AND "Status" < ?`, 0, str(m.msg.ID), str(metaStatus))
	if err != nil {
		return true, err
	}
	dels := bodyDeletes(m, chunks)
	del := func(id, sk string) { dels = append(dels, deleteOf(id, sk)) }
	for _, it := range items {
		sk := getS(it, "Status")
		del(m.msg.ID, sk)
		if strings.HasPrefix(sk, eventPrefix) {
			del(eventRef(getS(getM(it, "Attributes"), "EventId")), eventRefStatus)
		}
	}
	return true, s.writeItems(ctx, dels)
}
