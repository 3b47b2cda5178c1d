package dynamodb

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// The layout item (Id and Status "_LAYOUT") says that the table's items are
// placed as this store reads them: every _META item, event and alarm in its
// shard, a message held when its batch is suspended, and the counter items
// made from a count of the messages. create-table writes it once, after a scan of the table has done
// that (initLayout); Open wants it there.
const layoutStatus = "_LAYOUT"

// layoutVersion names the layout this store reads; a table of another is
// laid out again by create-table. 2: the counters are 16 items of a number
// per status (they were 16 items per status), and the suspended batches
// are in QueueIndex (they were read from the seed's StatusIndex). 3: the
// ACCEPTED and READY messages are in DueIndex too. 4: the delivered
// messages of a batch are in BatchIndex too, and the batches' tallies in
// QueueIndex.
const layoutVersion = 4

func layoutKey() map[string]types.AttributeValue {
	return itemKey(layoutStatus, layoutStatus)
}

// layoutReady reports whether the table's items were placed and counted for
// this store's layout and number of shards.
func layoutReady(ctx context.Context, client *dynamodb.Client, table string) (bool, error) {
	out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: layoutKey(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return false, fmt.Errorf("DynamoDB table %s: %w", table, err)
	}
	return out.Item != nil && getN(out.Item, "Shards") == shards && getN(out.Item, "Version") == layoutVersion, nil
}

// initLayout places every _META item, event and alarm of the table in its
// shard (seedIndexed: the table has the seed's StatusIndex, where a table
// of an earlier layout lists its batches) (a table of the seed's shape, or of an earlier store, has them in
// none) and makes the
// counter items from a count of them, once: it scans the whole table, so
// create-table does it, before relays use the table. Run again after an
// interruption, it starts over and counts anew.
func initLayout(ctx context.Context, client *dynamodb.Client, table string, seedIndexed bool) error {
	if ok, err := layoutReady(ctx, client, table); ok || err != nil {
		return err
	}
	s := &Store{db: client, table: table}
	batches, err := s.batchItems(ctx)
	if err == nil && seedIndexed {
		// A table laid out before version 2 lists its batches only in the
		// seed's index: their messages must stay held.
		var earlier []map[string]types.AttributeValue
		earlier, err = s.query(ctx, "SELECT * FROM "+s.from(seedIndex)+` WHERE "Status" = ?`, 0, str(batchStatus))
		batches = append(batches, earlier...)
	}
	if err != nil {
		return fmt.Errorf("read suspended batches of %s: %w", table, err)
	}
	suspended := suspendedOf(batches)
	total := map[backends.Status]int64{}
	var start map[string]types.AttributeValue
	for {
		resp, err := client.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true), ExclusiveStartKey: start})
		if err != nil {
			return fmt.Errorf("scan %s: %w", table, err)
		}
		for _, it := range resp.Items {
			if err := s.placeItem(ctx, it, suspended, total); err != nil {
				return err
			}
		}
		if resp.LastEvaluatedKey == nil {
			break
		}
		start = resp.LastEvaluatedKey
	}
	if err := s.putItems(ctx, counterItems(total)); err != nil {
		return fmt.Errorf("write the counters of %s: %w", table, err)
	}
	marker := layoutKey()
	marker["Shards"] = num(shards)
	marker["Version"] = num(layoutVersion)
	marker["CountedAt"] = tm(time.Now())
	if _, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: marker}); err != nil {
		return fmt.Errorf("mark %s as counted: %w", table, err)
	}
	return nil
}

// placeItem places an item of the table in its shard, when it has one: a
// message (counted in total), an event, an alarm, a suspended batch, a
// batch's tally; it removes the counter items of an earlier layout.
func (s *Store) placeItem(ctx context.Context, it map[string]types.AttributeValue, suspended []string, total map[backends.Status]int64) error {
	id, sk := getS(it, "Id"), getS(it, "Status")
	var place map[string]types.AttributeValue
	switch {
	case sk == metaStatus:
		m, err := metaFromItem(it)
		if err != nil {
			return err
		}
		total[m.msg.Status]++
		m.held = m.msg.Batch != "" && slices.Contains(suspended, m.msg.Batch) && m.msg.Status.Undelivered()
		return s.place(ctx, m)
	case sk == counterStatus && strings.Count(id, "#") > 1:
		return s.writeItems(ctx, []types.WriteRequest{deleteOf(id, sk)})
	case sk == batchStatus:
		place = batchPlace(strings.TrimPrefix(id, batchPrefix))
	case sk == tallyStatus:
		place = tallyPlace(strings.TrimPrefix(id, tallyPrefix))
	case strings.HasPrefix(sk, eventPrefix):
		place = map[string]types.AttributeValue{"Queue": str(eventQueueOf(eventFromItem(it)))}
	case strings.HasPrefix(sk, alarmPrefix):
		place = map[string]types.AttributeValue{"Queue": str(sharded(alarmQueue+strings.TrimPrefix(sk, alarmPrefix), shardOf(id)))}
	}
	if place == nil || getS(it, "Queue") == getS(place, "Queue") {
		return nil
	}
	sets, names, values := setClauses(place)
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.table),
		Key: itemKey(id, sk), UpdateExpression: aws.String("SET " + sets),
		ExpressionAttributeNames: names, ExpressionAttributeValues: values})
	if err != nil {
		return fmt.Errorf("place %s %s in its shard: %w", id, sk, err)
	}
	return nil
}

// place writes the index keys of a _META item as this store has them.
func (s *Store) place(ctx context.Context, m *meta) error {
	expr, names, values := setClauses(indexKeys(m))
	if m.held {
		expr += ", #a.Held = :held"
		names["#a"] = "Attributes"
		values[":held"] = &types.AttributeValueMemberBOOL{Value: true}
	}
	expr = "SET " + expr
	var gone []string
	for _, name := range optionalKeys() {
		if _, ok := values[":"+name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		expr += " REMOVE " + strings.Join(gone, ", ")
	}
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.table),
		Key:              itemKey(m.msg.ID, metaStatus),
		UpdateExpression: aws.String(expr), ExpressionAttributeNames: names, ExpressionAttributeValues: values})
	if err != nil {
		return fmt.Errorf("place message %s in its shard: %w", m.msg.ID, err)
	}
	return nil
}

// setClauses makes the clauses of an UpdateExpression's SET that give
// attrs their values, with the names and values they refer to.
func setClauses(attrs map[string]types.AttributeValue) (string, map[string]string, map[string]types.AttributeValue) {
	names := map[string]string{}
	values := map[string]types.AttributeValue{}
	var sets []string
	for k, v := range attrs {
		names["#"+k], values[":"+k] = k, v
		sets = append(sets, "#"+k+" = :"+k)
	}
	return strings.Join(sets, ", "), names, values
}

// putItems writes items 25 to a request.
func (s *Store) putItems(ctx context.Context, items []map[string]types.AttributeValue) error {
	reqs := make([]types.WriteRequest, len(items))
	for i, it := range items {
		reqs[i] = types.WriteRequest{PutRequest: &types.PutRequest{Item: it}}
	}
	return s.writeItems(ctx, reqs)
}

// writeItems makes writes (puts, deletes) 25 to a request, again for those
// DynamoDB leaves unprocessed.
func (s *Store) writeItems(ctx context.Context, reqs []types.WriteRequest) error {
	for len(reqs) > 0 {
		n := min(25, len(reqs))
		pending := map[string][]types.WriteRequest{s.table: reqs[:n]}
		reqs = reqs[n:]
		for len(pending[s.table]) > 0 {
			resp, err := s.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: pending})
			if err != nil {
				return err
			}
			pending = resp.UnprocessedItems
		}
	}
	return nil
}

// errNoLayout tells an operator how to prepare a table for this store.
func errNoLayout(table string) error {
	return fmt.Errorf("DynamoDB table %s has not been prepared for this version of postino (its messages placed in %d shards and counted); "+
		"stop the relays that use it and run: postino dynamodb create-table --table %s", table, shards, table)
}
