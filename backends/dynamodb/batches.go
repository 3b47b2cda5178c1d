package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// A suspended batch is an item (Id "_BATCH#code", Status "_BATCH"), in
// QueueIndex under BATCHES, so that a claim reads them all in one query. Its
// undelivered messages are held (items.go): their READY entries leave the
// claims' partitions, so that however many they are, claims never read
// them. Suspending holds those BatchIndex lists; a message created while
// the batch is suspended is held from the start; a claim holds one that
// slipped through (it reached READY as the batch was being suspended).
//
// Activation marks the item (Attributes.ActivatedAt) and lets the messages
// go; the marked item stays a while, so that Restore lets go those
// BatchIndex did not list yet (created held just before the activation),
// and then deletes it.
const (
	batchStatus = "_BATCH"
	batchPrefix = "_BATCH#"
	batchQueue  = "BATCHES"
	// activationGrace is how long BatchIndex may take to list a message
	// written before an activation.
	activationGrace = time.Minute
)

func batchKey(code string) map[string]types.AttributeValue {
	return itemKey(batchPrefix+code, batchStatus)
}

// batchPlace is where a batch item stands in QueueIndex.
func batchPlace(code string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"Queue": str(batchQueue), "QueueKey": str(code)}
}

func (s *Store) SuspendBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: suspendedItem(code)}); err != nil {
		return fmt.Errorf("suspend batch %s: %w", code, err)
	}
	if err := s.holdBatch(ctx, code, true); err != nil {
		return fmt.Errorf("suspend batch %s: %w", code, err)
	}
	return nil
}

// suspendedItem is the item of a batch suspended now.
func suspendedItem(code string) map[string]types.AttributeValue {
	item := batchKey(code)
	maps.Copy(item, batchPlace(code))
	item["Attributes"] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"SuspendedAt": tm(time.Now())}}
	return item
}

// ActivateBatch restarts the batch's tally first: while the batch is
// still suspended nothing of it is sent, so no count is lost.
func (s *Store) ActivateBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	var cf *types.ConditionalCheckFailedException
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.table), Key: tallyKey(code),
		UpdateExpression:          aws.String("SET Sent = :0, Hard = :0, Complaints = :0 REMOVE Tripped, TrippedAt"),
		ConditionExpression:       aws.String("attribute_exists(Id)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":0": num(0)}})
	if err != nil && !errors.As(err, &cf) {
		return fmt.Errorf("activate batch %s: restart its tally: %w", code, err)
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.table), Key: batchKey(code),
		UpdateExpression:          aws.String("SET #a.ActivatedAt = :now"),
		ConditionExpression:       aws.String("attribute_exists(Id) AND attribute_not_exists(#a.ActivatedAt)"),
		ExpressionAttributeNames:  map[string]string{"#a": "Attributes"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": tm(time.Now())}})
	if err != nil && !errors.As(err, &cf) {
		return fmt.Errorf("activate batch %s: %w", code, err)
	}
	if err := s.holdBatch(ctx, code, false); err != nil {
		return fmt.Errorf("activate batch %s: %w", code, err)
	}
	return nil
}

// SuspendedBatches lists the batches suspended and not activated since.
func (s *Store) SuspendedBatches(ctx context.Context) ([]string, error) {
	items, err := s.batchItems(ctx)
	if err != nil {
		return nil, err
	}
	return suspendedOf(items), nil
}

// suspendedOf lists, in order and once each, the batches of items that
// were not activated.
func suspendedOf(items []map[string]types.AttributeValue) []string {
	var out []string
	for _, it := range items {
		if _, activated := getM(it, "Attributes")["ActivatedAt"]; !activated {
			out = append(out, strings.TrimPrefix(getS(it, "Id"), batchPrefix))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func (s *Store) batchItems(ctx context.Context) ([]map[string]types.AttributeValue, error) {
	return s.query(ctx, "SELECT * FROM "+s.from("QueueIndex")+` WHERE "Queue" = ?`, 0, str(batchQueue))
}

// batchSuspended reads whether a batch is suspended now.
func (s *Store) batchSuspended(ctx context.Context, code string) (bool, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: batchKey(code), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return false, err
	}
	_, activated := getM(out.Item, "Attributes")["ActivatedAt"]
	return out.Item != nil && !activated, nil
}

// whileSuspended is the condition, in a transaction, that a batch is still
// suspended.
func (s *Store) whileSuspended(code string) types.ParameterizedStatement {
	return stmt("EXISTS(SELECT * FROM "+s.from("")+` WHERE "Id" = ? AND "Status" = ? AND "Attributes"."ActivatedAt" IS MISSING)`,
		str(batchPrefix+code), str(batchStatus))
}

// holdUpdate holds m, or lets it go, on condition that it did not change
// since it was read.
func (s *Store) holdUpdate(m *meta, held bool) types.ParameterizedStatement {
	readSeq, hadSeq := m.seq, m.hasSeq
	m.held = held
	m.seq++
	return s.metaUpdate(m, m.msg.Status, readSeq, hadSeq, nil)
}

// holdBatch holds the undelivered messages of a batch, or lets them go, in
// batches; one that changed meanwhile is read again, until none is left
// (BatchIndex may still show a message as it was before this wrote it:
// such a one is not written twice).
func (s *Store) holdBatch(ctx context.Context, code string, held bool) error {
	done := map[string]bool{}
	for attempt := 1; attempt <= 10; attempt++ {
		items, err := s.query(ctx, "SELECT * FROM "+s.from("BatchIndex")+` WHERE "BatchKey" = ?`, 0, str(code))
		if err != nil {
			return err
		}
		var todo []map[string]types.AttributeValue
		for _, it := range items {
			if m, err := metaFromItem(it); err == nil && m.held != held && !done[m.msg.ID] {
				todo = append(todo, it)
			}
		}
		if len(todo) == 0 {
			return nil
		}
		written, err := s.batch(ctx, todo, func(m *meta, _ *backends.Changes) ([]types.ParameterizedStatement, bool, error) {
			return []types.ParameterizedStatement{s.holdUpdate(m, held)}, true, nil
		})
		for _, m := range written {
			done[m.ID] = true
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// sweepActivated lets go the messages of batches activated lately, and
// deletes the marks of those activated longer than activationGrace ago.
func (s *Store) sweepActivated(ctx context.Context) error {
	items, err := s.batchItems(ctx)
	if err != nil {
		return err
	}
	for _, it := range items {
		a := getM(it, "Attributes")
		if _, activated := a["ActivatedAt"]; !activated {
			continue
		}
		code := strings.TrimPrefix(getS(it, "Id"), batchPrefix)
		if err := s.holdBatch(ctx, code, false); err != nil {
			return err
		}
		if time.Since(getTime(a, "ActivatedAt")) < activationGrace {
			continue
		}
		_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(s.table), Key: batchKey(code),
			ConditionExpression:       aws.String("#a.ActivatedAt = :at"),
			ExpressionAttributeNames:  map[string]string{"#a": "Attributes"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":at": a["ActivatedAt"]}})
		var cf *types.ConditionalCheckFailedException
		if err != nil && !errors.As(err, &cf) {
			return err
		}
	}
	return nil
}

// A batch's tally is an item (Id "_TALLY#code", Status "_TALLY") with the
// numbers Messages, Sent, Hard and Complaints and, once the brake tripped,
// Tripped and TrippedAt. It is read by its key, and listed in QueueIndex
// under "_TALLY#n" (n the shard of its code) by QueueKey, its code: every
// write of it places it, as it may make it.
const (
	tallyStatus = "_TALLY"
	tallyPrefix = "_TALLY#"
	tallyQueue  = "_TALLY"
	// tallyChunk is how many batches a transaction of TallyBatches adds
	// to: TransactWriteItems takes up to 100 items.
	tallyChunk = 100
)

func tallyKey(code string) map[string]types.AttributeValue {
	return itemKey(tallyPrefix+code, tallyStatus)
}

// tallyPlace is where a tally item stands in QueueIndex.
func tallyPlace(code string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"Queue": str(sharded(tallyQueue, shardOf(code))), "QueueKey": str(code)}
}

// placeTally is the SET clause that places a tally item: every write of
// one may make it. withPlace adds the names and values it refers to.
const placeTally = "#q = :q, QueueKey = :k"

func withPlace(code string, names map[string]string, values map[string]types.AttributeValue) (map[string]string, map[string]types.AttributeValue) {
	p := tallyPlace(code)
	names["#q"], values[":q"], values[":k"] = "Queue", p["Queue"], p["QueueKey"]
	return names, values
}

// TallyBatches adds with TransactWriteItems, as a PartiQL update can only
// add to a number that exists and ADD makes the item and its numbers. The
// batches are added in transactions of tallyChunk, one after the other:
// more than that are separate transactions, and when one fails those
// before it stay added (a relay counts fewer batches than that a flush).
func (s *Store) TallyBatches(ctx context.Context, tallies map[string]backends.BatchTally) error {
	codes := slices.Sorted(maps.Keys(tallies))
	for _, code := range codes {
		if err := backends.CheckBatch(code); err != nil {
			return err
		}
	}
	for chunk := range slices.Chunk(codes, tallyChunk) {
		items := make([]types.TransactWriteItem, len(chunk))
		for i, code := range chunk {
			t := tallies[code]
			names, values := withPlace(code, map[string]string{"#m": "Messages", "#s": "Sent", "#h": "Hard", "#c": "Complaints"},
				map[string]types.AttributeValue{":m": num(t.Messages), ":s": num(t.Sent), ":h": num(t.Hard), ":c": num(t.Complaints)})
			items[i] = types.TransactWriteItem{Update: &types.Update{TableName: aws.String(s.table), Key: tallyKey(code),
				UpdateExpression:         aws.String("ADD #m :m, #s :s, #h :h, #c :c SET " + placeTally),
				ExpressionAttributeNames: names, ExpressionAttributeValues: values}}
		}
		if _, err := s.writeTxn(ctx, items); err != nil {
			return fmt.Errorf("add to the tallies of batches %s…: %w", chunk[0], err)
		}
	}
	return nil
}

// BatchTallies reads the tally items, consistently, in a BatchGetItem
// request per 100 codes.
func (s *Store) BatchTallies(ctx context.Context, codes []string) (map[string]backends.BatchTally, error) {
	codes = slices.Compact(slices.Sorted(slices.Values(codes))) // a request may not name a key twice
	out := map[string]backends.BatchTally{}
	for chunk := range slices.Chunk(codes, 100) {
		keys := make([]map[string]types.AttributeValue, len(chunk))
		for i, code := range chunk {
			keys[i] = tallyKey(code)
		}
		items, err := s.getItems(ctx, keys)
		if err != nil {
			return nil, fmt.Errorf("read the tallies of batches: %w", err)
		}
		for _, it := range items {
			out[strings.TrimPrefix(getS(it, "Id"), tallyPrefix)] = backends.BatchTally{
				Messages: getN(it, "Messages"), Sent: getN(it, "Sent"), Hard: getN(it, "Hard"), Complaints: getN(it, "Complaints"),
				Tripped: getS(it, "Tripped"), TrippedAt: getTime(it, "TrippedAt")}
		}
	}
	return out, nil
}

// TripBatch writes the suspended batch item and the reason in the tally in
// one transaction, on condition that the batch is not suspended (no item,
// or one activated): that decides which of relays tripping it at once did.
// Then it holds the batch's messages as SuspendBatch does; those are many
// transactions, which cannot share the first. Should holding fail, the
// batch is suspended all the same (claims hold its messages as they meet
// them): it reports true, with the error.
func (s *Store) TripBatch(ctx context.Context, code, reason string, at time.Time) (bool, error) {
	if err := backends.CheckBatch(code); err != nil {
		return false, err
	}
	names, values := withPlace(code, map[string]string{"#t": "Tripped", "#at": "TrippedAt"},
		map[string]types.AttributeValue{":t": str(reason), ":at": tm(at)})
	items := []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String(s.table), Item: suspendedItem(code),
			ConditionExpression:      aws.String("attribute_not_exists(Id) OR attribute_exists(#a.ActivatedAt)"),
			ExpressionAttributeNames: map[string]string{"#a": "Attributes"}}},
		{Update: &types.Update{TableName: aws.String(s.table), Key: tallyKey(code),
			UpdateExpression:         aws.String("SET #t = :t, #at = :at, " + placeTally),
			ExpressionAttributeNames: names, ExpressionAttributeValues: values}},
	}
	switch i, err := s.writeTxn(ctx, items); {
	case errors.Is(err, errCondition) && i == 0:
		return false, nil
	case err != nil:
		return false, fmt.Errorf("trip batch %s: %w", code, err)
	}
	if err := s.holdBatch(ctx, code, true); err != nil {
		return true, fmt.Errorf("trip batch %s: it is suspended, but holding its messages failed (claims hold them as they meet them): %w", code, err)
	}
	return true, nil
}

// ListBatches reads the tally items' codes from QueueIndex, a query a
// shard, each of up to a page and one more, merged in code order.
func (s *Store) ListBatches(ctx context.Context, after string, limit int) ([]string, string, error) {
	in := dynamodb.QueryInput{IndexName: aws.String("QueueIndex"), KeyConditionExpression: aws.String("#q = :p"),
		ProjectionExpression: aws.String("QueueKey"), ExpressionAttributeNames: map[string]string{"#q": "Queue"}}
	if after != "" {
		in.KeyConditionExpression = aws.String("#q = :p AND QueueKey > :after")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":after": str(after)}
	}
	want := 0
	if limit > 0 {
		want = limit + 1
	}
	items, err := s.queryParts(ctx, &in, shardsOf(tallyQueue), "QueueKey", want)
	if err != nil {
		return nil, "", fmt.Errorf("list batches: %w", err)
	}
	more := want > 0 && len(items) == want
	if more {
		items = items[:limit]
	}
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = getS(it, "QueueKey")
	}
	if !more {
		return out, "", nil
	}
	return out, out[len(out)-1], nil
}

// A batch's messages are in BatchIndex under two partitions: its code for
// the undelivered ones, which suspending and activating read, and the
// code after doneBatchPrefix for the others, so that those reads grow with
// what is left to send, not with the batch.
const doneBatchPrefix = "DONE#" // no code holds '#'

// batchPart is the BatchIndex partition of a message of batch code.
func batchPart(code string, undelivered bool) string {
	if undelivered {
		return code
	}
	return doneBatchPrefix + code
}

// batchParts are the BatchIndex partitions of batch code.
func batchParts(code string) []string { return []string{batchPart(code, true), batchPart(code, false)} }

// BatchCounts reads the statuses of the batch's messages from its
// partitions of BatchIndex, nothing else of them, and counts them as it
// reads: every message of the batch is read.
func (s *Store) BatchCounts(ctx context.Context, code string) (map[backends.Status]int, error) {
	out := map[backends.Status]int{}
	for _, part := range batchParts(code) {
		pages := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{TableName: aws.String(s.table), IndexName: aws.String("BatchIndex"),
			KeyConditionExpression: aws.String("BatchKey = :p"), ProjectionExpression: aws.String("#a.Latest"),
			ExpressionAttributeNames:  map[string]string{"#a": "Attributes"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":p": str(part)}})
		for pages.HasMorePages() {
			resp, err := pages.NextPage(ctx)
			if err != nil {
				return nil, fmt.Errorf("count the messages of batch %s: %w", code, err)
			}
			for _, it := range resp.Items {
				out[backends.Status(getS(getM(it, "Attributes"), "Latest"))]++
			}
		}
	}
	return out, nil
}
