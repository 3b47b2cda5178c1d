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
	item := batchKey(code)
	maps.Copy(item, batchPlace(code))
	item["Attributes"] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"SuspendedAt": tm(time.Now())}}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item}); err != nil {
		return fmt.Errorf("suspend batch %s: %w", code, err)
	}
	if err := s.holdBatch(ctx, code, true); err != nil {
		return fmt.Errorf("suspend batch %s: %w", code, err)
	}
	return nil
}

func (s *Store) ActivateBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(s.table), Key: batchKey(code),
		UpdateExpression:          aws.String("SET #a.ActivatedAt = :now"),
		ConditionExpression:       aws.String("attribute_exists(Id) AND attribute_not_exists(#a.ActivatedAt)"),
		ExpressionAttributeNames:  map[string]string{"#a": "Attributes"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":now": tm(time.Now())}})
	var cf *types.ConditionalCheckFailedException
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
