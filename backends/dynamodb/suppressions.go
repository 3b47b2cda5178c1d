package dynamodb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// The suppression list lives in the outbox's table, in items of its own,
// placed in the indexes the table has (no index and no layout of its own):
//
//   - an entry: Id "_SUP#key", Status "_SUP#scope", the entry as JSON in
//     Entry, its Reason, and Rev, its revision, one more with each write,
//     which every write of it is conditional on. An active entry is in
//     QueueIndex under "_SUP#n" (n the shard of its key) by QueueKey
//     "key scope", so that the list is read in key order, the shards at
//     once and merged, as the messages' queues are; one that expires is
//     also in DueIndex by DueKey (its expiry), so that pruning reads the
//     expired ones only. An entry not active yet is in neither.
//   - its history: Id "_SUPH#key", Status the row's time, the time it was
//     written and a random suffix, so that rows read oldest first; the
//     row as JSON in Event. Rows have no TTL: they outlive their entry.
//   - the counts of active entries by reason, in counterShards counter
//     items (_SUPCOUNT#n, counts.go), a number per reason.
//
// A change of an entry is one PartiQL transaction of the entry, its
// history row and a counter item, conditional on the entry as it was read,
// and read again and retried when another change came first.
const (
	supPrefix     = "_SUP#"
	supHistPrefix = "_SUPH#"
	supQueue      = "_SUP"
	// supRetries bounds the attempts of a change that keeps meeting
	// another change of its entry.
	supRetries = 20
)

func supKey(key, scope string) map[string]types.AttributeValue {
	return itemKey(supPrefix+key, supPrefix+scope)
}

// supQueueKey orders entries by key, then scope. No key or scope holds a
// space, and every character they hold sorts after it.
func supQueueKey(key, scope string) string { return key + " " + scope }

// supItem is the item of entry e at revision rev.
func supItem(e backends.Suppression, rev int64) (map[string]types.AttributeValue, error) {
	b, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	it := supKey(e.Key, e.Scope)
	it["Entry"], it["Reason"], it["Rev"] = str(string(b)), str(string(e.Reason)), num(rev)
	if e.Active {
		qk := supQueueKey(e.Key, e.Scope)
		it["Queue"], it["QueueKey"] = str(sharded(supQueue, shardOf(e.Key))), str(qk)
		if !e.Expires.IsZero() {
			it["DueKey"] = str(keyTime(e.Expires) + "#" + qk)
		}
	}
	return it, nil
}

func supFromItem(it map[string]types.AttributeValue) (backends.Suppression, int64, error) {
	var e backends.Suppression
	if err := json.Unmarshal([]byte(getS(it, "Entry")), &e); err != nil {
		return e, 0, fmt.Errorf("suppression %s %s: stored record is unreadable: %w", getS(it, "Id"), getS(it, "Status"), err)
	}
	return e, getN(it, "Rev"), nil
}

// getSuppression reads the entry of key and scope, consistently; nil when
// there is none.
func (s *Store) getSuppression(ctx context.Context, key, scope string) (*backends.Suppression, int64, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: supKey(key, scope), ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item == nil {
		return nil, 0, err
	}
	e, rev, err := supFromItem(out.Item)
	return &e, rev, err
}

// supStmts are the statements that replace cur, read at revision rev (nil:
// none), by next (nil: remove it), with history row ev; they add to deltas
// what the change moves in the counts (countStmts writes them).
func (s *Store) supStmts(cur *backends.Suppression, rev int64, next *backends.Suppression, ev backends.SuppressionEvent,
	deltas map[backends.SuppressionReason]int) ([]types.ParameterizedStatement, error) {
	var entry types.ParameterizedStatement
	switch {
	case next == nil:
		entry = stmt("DELETE FROM "+s.from("")+` WHERE "Id" = ? AND "Status" = ? AND "Rev" = ?`,
			str(supPrefix+cur.Key), str(supPrefix+cur.Scope), num(rev))
	case cur == nil:
		it, err := supItem(*next, 1)
		if err != nil {
			return nil, err
		}
		entry = s.insert(it)
	default:
		it, err := supItem(*next, rev+1)
		if err != nil {
			return nil, err
		}
		entry = s.supUpdate(it, rev)
	}
	hist, err := s.supHistoryItem(ev)
	if err != nil {
		return nil, err
	}
	if cur != nil && cur.Active {
		deltas[cur.Reason]--
	}
	if next != nil && next.Active {
		deltas[next.Reason]++
	}
	return []types.ParameterizedStatement{entry, s.insert(hist)}, nil
}

// countStmts adds deltas to one counter item, picked at random; none when
// they move nothing.
func (s *Store) countStmts(deltas map[backends.SuppressionReason]int) []types.ParameterizedStatement {
	var reasons []backends.SuppressionReason
	var ns []int
	for r, n := range deltas {
		if n != 0 {
			reasons, ns = append(reasons, r), append(ns, n)
		}
	}
	if len(reasons) == 0 {
		return nil
	}
	return []types.ParameterizedStatement{addStmt(s.from(""), supCounterKey(rand.N(counterShards)), reasons, ns)}
}

// supChange runs the change of one entry: supStmts and the counts, in one
// transaction.
func (s *Store) supChange(ctx context.Context, cur *backends.Suppression, rev int64, next *backends.Suppression, ev backends.SuppressionEvent) error {
	deltas := map[backends.SuppressionReason]int{}
	stmts, err := s.supStmts(cur, rev, next, ev, deltas)
	if err != nil {
		return err
	}
	_, err = s.txn(ctx, append(stmts, s.countStmts(deltas)...))
	return err
}

// supUpdate writes the entry item it over the one at revision rev,
// removing the index keys it has not.
func (s *Store) supUpdate(it map[string]types.AttributeValue, rev int64) types.ParameterizedStatement {
	text := "UPDATE " + s.from("")
	var params []types.AttributeValue
	var removes string
	for _, name := range []string{"Entry", "Reason", "Rev", "Queue", "QueueKey", "DueKey"} {
		if v, ok := it[name]; ok {
			text += ` SET "` + name + `" = ?`
			params = append(params, v)
		} else {
			removes += ` REMOVE "` + name + `"`
		}
	}
	return stmt(text+removes+` WHERE "Id" = ? AND "Status" = ? AND "Rev" = ?`, append(params, it["Id"], it["Status"], num(rev))...)
}

// supHistoryItem is the item of a history row.
func (s *Store) supHistoryItem(ev backends.SuppressionEvent) (map[string]types.AttributeValue, error) {
	b, err := json.Marshal(ev)
	if err != nil {
		return nil, err
	}
	sk := keyTime(ev.At) + "#" + keyTime(time.Now()) + "#" + strconv.FormatUint(rand.Uint64(), 36)
	return map[string]types.AttributeValue{"Id": str(supHistPrefix + ev.Key), "Status": str(sk), "Event": str(string(b))}, nil
}

// raced reports whether a change's transaction failed because another
// change of its entry came first: it is read again and retried.
func raced(err error) bool { return errors.Is(err, errCondition) || errors.Is(err, errDupItem) }

func (s *Store) Suppress(ctx context.Context, c backends.SuppressionChange) (backends.Suppression, error) {
	if err := c.Check(); err != nil {
		return backends.Suppression{}, err
	}
	for attempt := 1; ; attempt++ {
		cur, rev, err := s.getSuppression(ctx, c.Entry.Key, c.Entry.Scope)
		if err != nil {
			return backends.Suppression{}, fmt.Errorf("suppress %s: %w", c.Entry.Key, err)
		}
		next, changed := c.Apply(cur)
		if !changed {
			return next, nil
		}
		err = s.supChange(ctx, cur, rev, &next, c.EventOf(next))
		if raced(err) && attempt < supRetries {
			continue
		}
		if err != nil {
			return backends.Suppression{}, fmt.Errorf("suppress %s: %w", c.Entry.Key, err)
		}
		return next, nil
	}
}

// Suppressed reads the entries of every key for the two scopes in
// BatchGetItem requests of 100 keys, consistently.
func (s *Store) Suppressed(ctx context.Context, stream string, addrs []string, now time.Time) ([]backends.Suppression, error) {
	scopes := []string{backends.ScopeAll}
	if stream != backends.ScopeAll {
		scopes = append(scopes, stream)
	}
	var keys []map[string]types.AttributeValue
	for _, k := range backends.SuppressionKeys(addrs) {
		for _, scope := range scopes {
			keys = append(keys, supKey(k, scope))
		}
	}
	var out []backends.Suppression
	for chunk := range slices.Chunk(keys, 100) {
		items, err := s.getItems(ctx, chunk)
		if err != nil {
			return nil, fmt.Errorf("suppressed: %w", err)
		}
		for _, it := range items {
			e, _, err := supFromItem(it)
			if err != nil {
				return nil, err
			}
			if e.Blocks(now) {
				out = append(out, e)
			}
		}
	}
	return out, nil
}

func (s *Store) SuppressionsOf(ctx context.Context, addr string) ([]backends.Suppression, error) {
	key, err := backends.SuppressionKey(addr)
	if err != nil {
		return nil, err
	}
	items, err := s.query(ctx, "SELECT * FROM "+s.from("")+` WHERE "Id" = ?`, 0, str(supPrefix+key))
	if err != nil {
		return nil, fmt.Errorf("suppressions of %s: %w", key, err)
	}
	var out []backends.Suppression
	for _, it := range items {
		e, _, err := supFromItem(it)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func (s *Store) Unsuppress(ctx context.Context, r backends.SuppressionRemoval) error {
	key, err := backends.SuppressionKey(r.Address)
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		cur, rev, err := s.getSuppression(ctx, key, r.Scope)
		if err != nil {
			return fmt.Errorf("unsuppress %s: %w", key, err)
		}
		if cur == nil {
			return fmt.Errorf("%s has no suppression of scope %s: %w", r.Address, r.Scope, backends.ErrNotFound)
		}
		err = s.supChange(ctx, cur, rev, nil, r.RemovalEvent(key, cur.Reason))
		if raced(err) && attempt < supRetries {
			continue
		}
		if err != nil {
			return fmt.Errorf("unsuppress %s: %w", key, err)
		}
		return nil
	}
}

func (s *Store) SuppressionHistory(ctx context.Context, addr string) ([]backends.SuppressionEvent, error) {
	key, err := backends.SuppressionKey(addr)
	if err != nil {
		return nil, err
	}
	items, err := s.query(ctx, "SELECT * FROM "+s.from("")+` WHERE "Id" = ?`, 0, str(supHistPrefix+key))
	if err != nil {
		return nil, fmt.Errorf("suppression history of %s: %w", key, err)
	}
	out := make([]backends.SuppressionEvent, len(items))
	for i, it := range items {
		if err := json.Unmarshal([]byte(getS(it, "Event")), &out[i]); err != nil {
			return nil, fmt.Errorf("suppression history of %s: stored record is unreadable: %w", key, err)
		}
	}
	return out, nil
}

// ListSuppressions reads the page from QueueIndex, a query a shard, each
// of up to a page and one more, merged in key order. A reason is a
// filter: the entries of other reasons are read and left.
func (s *Store) ListSuppressions(ctx context.Context, q backends.SuppressionQuery) ([]backends.Suppression, string, error) {
	from, to := lowKey, q.Prefix+"\U0010FFFF"
	if q.Prefix != "" {
		from = q.Prefix
	}
	if q.After != "" {
		key, scope, err := backends.ParseSuppressionCursor(q.After)
		if err != nil {
			return nil, "", err
		}
		// Just past the cursor's entry: no key holds a character below a
		// space.
		from = max(from, supQueueKey(key, scope)+" ")
	}
	if from > to {
		return nil, "", nil
	}
	want := 0
	if q.Limit > 0 {
		want = q.Limit + 1
	}
	in := dynamodb.QueryInput{IndexName: aws.String("QueueIndex"),
		KeyConditionExpression:   aws.String("#q = :p AND QueueKey BETWEEN :lo AND :hi"),
		ExpressionAttributeNames: map[string]string{"#q": "Queue"}, ExpressionAttributeValues: map[string]types.AttributeValue{":lo": str(from), ":hi": str(to)}}
	if q.Reason != "" {
		in.FilterExpression = aws.String("#r = :r")
		in.ExpressionAttributeNames["#r"] = "Reason"
		in.ExpressionAttributeValues[":r"] = str(string(q.Reason))
	}
	items, err := s.queryParts(ctx, &in, shardsOf(supQueue), "QueueKey", want)
	if err != nil {
		return nil, "", fmt.Errorf("list suppressions: %w", err)
	}
	more := want > 0 && len(items) == want
	if more {
		items = items[:q.Limit]
	}
	out := make([]backends.Suppression, len(items))
	for i, it := range items {
		if out[i], _, err = supFromItem(it); err != nil {
			return nil, "", err
		}
	}
	if !more {
		return out, "", nil
	}
	return out, backends.SuppressionCursor(out[len(out)-1]), nil
}

// SuppressionCounts sums the counter items, read in one request.
func (s *Store) SuppressionCounts(ctx context.Context) (map[backends.SuppressionReason]int, error) {
	keys := make([]map[string]types.AttributeValue, counterShards)
	for i := range keys {
		keys[i] = supCounterKey(i)
	}
	items, err := s.getItems(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("suppression counts: %w", err)
	}
	out := map[backends.SuppressionReason]int{}
	for _, it := range items {
		for _, r := range backends.SuppressionReasons() {
			out[r] += int(getN(it, string(r)))
		}
	}
	for r, n := range out {
		if n == 0 {
			delete(out, r)
		}
	}
	return out, nil
}

// importChunk is how many entries a transaction of an import writes: with
// their history rows and a counter item, 99 statements of the 100 a
// transaction may hold.
const importChunk = 49

// ImportSuppressions writes the entries in transactions of importChunk,
// one after the other, each read first and written on condition that it
// did not change meanwhile, so that the counts stay exact whatever stops
// the import; an import run again after a failure ends the same. A
// transaction may not write an item twice: an entry whose address and
// scope the chunk holds already starts the next.
func (s *Store) ImportSuppressions(ctx context.Context, entries []backends.Suppression, by string) error {
	for len(entries) > 0 {
		n, seen := 0, map[string]bool{}
		for ; n < len(entries) && n < importChunk; n++ {
			e := entries[n]
			if e.Key == "" {
				return errors.New("import: an entry was not prepared (backends.PrepareImport)")
			}
			if seen[supQueueKey(e.Key, e.Scope)] {
				break
			}
			seen[supQueueKey(e.Key, e.Scope)] = true
		}
		if err := s.importChunk(ctx, entries[:n], by); err != nil {
			return fmt.Errorf("import: %w", err)
		}
		entries = entries[n:]
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// importChunk writes entries, each once, in one transaction.
func (s *Store) importChunk(ctx context.Context, entries []backends.Suppression, by string) error {
	keys := make([]map[string]types.AttributeValue, len(entries))
	for i, e := range entries {
		keys[i] = supKey(e.Key, e.Scope)
	}
	for attempt := 1; ; attempt++ {
		items, err := s.getItems(ctx, keys)
		if err != nil {
			return err
		}
		type read struct {
			e   backends.Suppression
			rev int64
		}
		cur := map[string]read{}
		for _, it := range items {
			e, rev, err := supFromItem(it)
			if err != nil {
				return err
			}
			cur[supQueueKey(e.Key, e.Scope)] = read{e, rev}
		}
		var stmts []types.ParameterizedStatement
		deltas := map[backends.SuppressionReason]int{}
		for _, e := range entries {
			var had *backends.Suppression
			r, ok := cur[supQueueKey(e.Key, e.Scope)]
			if ok {
				had = &r.e
			}
			st, err := s.supStmts(had, r.rev, &e, backends.ImportEvent(e, by), deltas)
			if err != nil {
				return err
			}
			stmts = append(stmts, st...)
		}
		_, err = s.txn(ctx, append(stmts, s.countStmts(deltas)...))
		if raced(err) && attempt < supRetries {
			continue
		}
		return err
	}
}

// PruneSuppressions reads the expired entries from DueIndex, a query a
// shard, and removes each in a transaction of its own, conditional on the
// entry as read: one changed meanwhile is left to the next round.
func (s *Store) PruneSuppressions(ctx context.Context, now time.Time, limit int) (int, error) {
	in := dynamodb.QueryInput{IndexName: aws.String(dueIndex),
		KeyConditionExpression:    aws.String("#q = :p AND DueKey < :now"),
		ExpressionAttributeNames:  map[string]string{"#q": "Queue"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": str(keyTime(now))}}
	items, err := s.queryParts(ctx, &in, shardsOf(supQueue), "DueKey", limit)
	if err != nil {
		return 0, fmt.Errorf("prune suppressions: %w", err)
	}
	n := 0
	for _, it := range items {
		e, rev, err := supFromItem(it)
		if err != nil {
			return n, err
		}
		ev := backends.SuppressionEvent{Key: e.Key, Scope: e.Scope, At: now, Action: backends.ActionExpired, Reason: e.Reason, By: "retention"}
		switch err := s.supChange(ctx, &e, rev, nil, ev); {
		case raced(err):
			continue
		case err != nil:
			return n, fmt.Errorf("prune suppressions: %w", err)
		}
		n++
	}
	return n, nil
}
