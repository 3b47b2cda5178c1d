package dynamodb

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// How many messages each status holds is kept in counter items (Id
// "_COUNT#STATUS#n", Status "_COUNT", the number in N), counterShards per
// status: a change of status adds to one of them, picked at random, in its
// own transaction, so that the count is exact whatever crashes, and
// concurrent writers seldom meet on one item. Counts sums them.
// create-table makes them, counting the table once (initLayout).
const (
	counterPrefix = "_COUNT#"
	counterStatus = "_COUNT"
	counterShards = 16
)

func counterKey(st backends.Status, shard int) map[string]types.AttributeValue {
	return itemKey(counterPrefix+sharded(string(st), shard), counterStatus)
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

// counterStmts makes the counter updates of c, one per status: a transaction may
// name an item once.
func (s *Store) counterStmts(c counts) []types.ParameterizedStatement {
	var out []types.ParameterizedStatement
	for st, n := range c {
		if n == 0 {
			continue
		}
		k := counterKey(st, rand.N(counterShards))
		out = append(out, stmt("UPDATE "+s.from("")+` SET "N" = "N" + ? WHERE "Id" = ? AND "Status" = ?`, num(n), k["Id"], k["Status"]))
	}
	return out
}

// Counts sums the counter items, a hundred to a request, the requests at
// once.
func (s *Store) Counts(ctx context.Context) (map[backends.Status]int, error) {
	var keys []map[string]types.AttributeValue
	for _, st := range backends.Statuses() {
		for i := range counterShards {
			keys = append(keys, counterKey(st, i))
		}
	}
	var (
		mu    sync.Mutex
		total = map[backends.Status]int{}
	)
	chunks := slices.Collect(slices.Chunk(keys, 100))
	err := eachAtOnce(len(chunks), func(i int) error {
		items, err := s.getItems(ctx, chunks[i])
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, it := range items {
			id := getS(it, "Id")
			st := id[len(counterPrefix):strings.LastIndex(id, "#")]
			total[backends.Status(st)] += int(getN(it, "N"))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("counts: %w", err)
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
// each status: the first shard holds the count.
func counterItems(total map[backends.Status]int64) []map[string]types.AttributeValue {
	var out []map[string]types.AttributeValue
	for _, st := range backends.Statuses() {
		for i := range counterShards {
			it := counterKey(st, i)
			n := int64(0)
			if i == 0 {
				n = total[st]
			}
			it["N"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(n, 10)}
			out = append(out, it)
		}
	}
	return out
}
