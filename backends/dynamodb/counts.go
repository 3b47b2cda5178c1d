package dynamodb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"

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
const (
	counterStatus = "_COUNT"
	counterShards = 16
)

func counterKey(shard int) map[string]types.AttributeValue {
	return itemKey(sharded(counterStatus, shard), counterStatus)
}

// counts is a change of the counters: statuses and what they gain.
type counts map[backends.Status]int64

// move counts one message leaving from (none at create) for to (none when
// it is deleted).
func (c counts) move(from, to backends.Status) {
	if from == to {
		return
	}
	if from != "" {
		c[from]--
	}
	if to != "" {
		c[to]++
	}
}

// counterStmts makes the update of one counter item that c makes, if any.
func (s *Store) counterStmts(c counts) []types.ParameterizedStatement {
	var (
		sets   []string
		params []types.AttributeValue
	)
	for _, st := range backends.Statuses() {
		if n := c[st]; n != 0 {
			sets = append(sets, `"`+string(st)+`" = "`+string(st)+`" + ?`)
			params = append(params, num(n))
		}
	}
	if len(sets) == 0 {
		return nil
	}
	k := counterKey(rand.N(counterShards))
	return []types.ParameterizedStatement{stmt("UPDATE "+s.from("")+" SET "+strings.Join(sets, ", ")+` WHERE "Id" = ? AND "Status" = ?`,
		append(params, k["Id"], k["Status"])...)}
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
