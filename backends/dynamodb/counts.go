package dynamodb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// How many messages each status holds is kept in counterShards counter
// items (Id "_COUNT#n", Status "_COUNT"), each with a number for every
// status (the attribute named after it): a change adds to the statuses it
// moves in one of them, picked at random, in its own transaction, so that
// the count is exact whatever crashes, and concurrent writers seldom meet
// on one item. Counts sums them, all in one request. create-table makes
// them, counting the table once (initLayout), with every status there, as
// an update may only add to a number that exists.
//
// The counts of active suppression entries by reason are kept alike, in
// counterShards items (Id "_SUPCOUNT#n", Status "_SUPCOUNT") with a number
// for every reason.
const (
	counterStatus    = "_COUNT"
	supCounterStatus = "_SUPCOUNT"
	counterShards    = 16
)

func counterKey(shard int) map[string]types.AttributeValue {
	return itemKey(sharded(counterStatus, shard), counterStatus)
}

func supCounterKey(shard int) map[string]types.AttributeValue {
	return itemKey(sharded(supCounterStatus, shard), supCounterStatus)
}

// ensureCounters gives the counter items a number for every status and
// every suppression reason this store knows: a table counted by an
// earlier version lacks those added since (SUPPRESSED, say), and the
// first change of a status that lacks its number would fail. It reads
// them in one request, and writes only when one lacks a number.
func (s *Store) ensureCounters(ctx context.Context) error {
	keys := make([]map[string]types.AttributeValue, 0, 2*counterShards)
	sup := make([]map[string]types.AttributeValue, 0, counterShards)
	for i := range counterShards {
		keys = append(keys, counterKey(i))
		sup = append(sup, supCounterKey(i))
	}
	if err := ensureNumbers(ctx, s, keys, backends.Statuses()); err != nil {
		return fmt.Errorf("counters of %s: %w", s.table, err)
	}
	if err := ensureNumbers(ctx, s, sup, backends.SuppressionReasons()); err != nil {
		return fmt.Errorf("suppression counters of %s: %w", s.table, err)
	}
	return nil
}

// ensureNumbers makes sure that each item of keys (up to 100) exists with
// a number for every one of names, since a PartiQL update may only add to
// a number that exists, in an item that exists. It reads them in one
// request, and writes those that lack one at once, each an UpdateItem
// that sets the missing numbers to zero and leaves the others: writers
// that meet there do no harm to each other.
func ensureNumbers[N ~string](ctx context.Context, s *Store, keys []map[string]types.AttributeValue, names []N) error {
	items, err := s.getItems(ctx, keys)
	if err != nil {
		return err
	}
	have := map[string]map[string]types.AttributeValue{}
	for _, it := range items {
		have[getS(it, "Id")+" "+getS(it, "Status")] = it
	}
	var lacking []map[string]types.AttributeValue
	for _, k := range keys {
		it := have[getS(k, "Id")+" "+getS(k, "Status")]
		for _, name := range names {
			if _, ok := it[string(name)]; !ok {
				lacking = append(lacking, k)
				break
			}
		}
	}
	if len(lacking) == 0 {
		return nil
	}
	sets := make([]string, len(names))
	attrs := map[string]string{}
	for i, name := range names {
		n := "#n" + strconv.Itoa(i)
		attrs[n] = string(name)
		sets[i] = n + " = if_not_exists(" + n + ", :zero)"
	}
	return eachAtOnce(len(lacking), func(i int) error {
		_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.table), Key: lacking[i],
			UpdateExpression: aws.String("SET " + strings.Join(sets, ", ")), ExpressionAttributeNames: attrs,
			ExpressionAttributeValues: map[string]types.AttributeValue{":zero": num(0)}})
		return err
	})
}

// counterStmts makes the updates of the counters that c makes, and
// forgets them: of one counter item for the statuses moved, and of one
// activity item of this minute for what c counts (activity.go), each
// picked at random. That is one more item in the transaction of a change
// that counts an activity, none in the others'.
func (s *Store) counterStmts(ctx context.Context, c *backends.Changes) ([]types.ParameterizedStatement, error) {
	_, statuses, deltas := c.Take()
	var out []types.ParameterizedStatement
	if len(statuses) > 0 {
		out = append(out, addStmt(s.from(""), counterKey(rand.N(counterShards)), statuses, deltas))
	}
	acts, ns := c.TakeActivities()
	if len(acts) == 0 {
		return out, nil
	}
	minute := backends.MinuteOf(time.Now())
	if err := s.ensureMinute(ctx, minute); err != nil {
		return nil, err
	}
	return append(out, addStmt(s.from(""), activityKey(rand.N(counterShards), minute), acts, ns)), nil
}

// addStmt adds, in the item of key in table (Store.from), each of ns to
// the number named after the name at its place in names.
func addStmt[N ~string](table string, key map[string]types.AttributeValue, names []N, ns []int) types.ParameterizedStatement {
	sets := make([]string, len(names))
	params := make([]types.AttributeValue, 0, len(names)+2)
	for i, name := range names {
		sets[i] = `"` + string(name) + `" = "` + string(name) + `" + ?`
		params = append(params, num(int64(ns[i])))
	}
	return stmt("UPDATE "+table+" SET "+strings.Join(sets, ", ")+` WHERE "Id" = ? AND "Status" = ?`,
		append(params, key["Id"], key["Status"])...)
}

// Counts sums the counter items, read in one request.
func (s *Store) Counts(ctx context.Context) (map[backends.Status]int, error) {
	keys := make([]map[string]types.AttributeValue, counterShards)
	for i := range keys {
		keys[i] = counterKey(i)
	}
	items, err := s.getItems(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("counts: %w", err)
	}
	total := map[backends.Status]int{}
	for _, it := range items {
		for _, st := range backends.Statuses() {
			if n := getN(it, string(st)); n != 0 {
				total[st] += int(n)
			}
		}
	}
	for st, n := range total {
		if n == 0 {
			delete(total, st)
		}
	}
	return total, nil
}

// getItems reads up to 100 items by key, consistently, again for those
// DynamoDB leaves unprocessed.
func (s *Store) getItems(ctx context.Context, keys []map[string]types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	req := map[string]types.KeysAndAttributes{s.table: {Keys: keys, ConsistentRead: aws.Bool(true)}}
	for len(req) > 0 && len(req[s.table].Keys) > 0 {
		resp, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
		if err != nil {
			return nil, err
		}
		out = append(out, resp.Responses[s.table]...)
		req = resp.UnprocessedKeys
	}
	return out, nil
}

// eachAtOnce runs fn(0) … fn(n-1) at once and returns the first error.
func eachAtOnce(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = fn(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// counterItems are the counter items of a table holding total messages in
// each status: the first shard holds the counts, the others zeros.
func counterItems(total map[backends.Status]int64) []map[string]types.AttributeValue {
	out := make([]map[string]types.AttributeValue, counterShards)
	for i := range out {
		it := counterKey(i)
		for _, st := range backends.Statuses() {
			n := int64(0)
			if i == 0 {
				n = total[st]
			}
			it[string(st)] = num(n)
		}
		out[i] = it
	}
	return out
}
