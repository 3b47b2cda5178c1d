package dynamodb

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// The documents are items of one partition (Id "_DOCS"), their keys in the
// sort key after "_DOC#", so that a listing by prefix is one query in key
// order. They are few and small (MTA-STS policies, each relay's TLS report
// counts), so one partition holds them. Their TTL lets DynamoDB delete
// them once expired; the reads leave out those it has not deleted yet.
const (
	docsPartition = "_DOCS"
	docPrefix     = "_DOC#"
)

func (s *Store) PutDocument(ctx context.Context, d backends.Document) error {
	if err := backends.CheckDocument(d); err != nil {
		return err
	}
	item := itemKey(docsPartition, docPrefix+d.Key)
	item["Value"] = &types.AttributeValueMemberB{Value: append([]byte{}, d.Value...)}
	item["Expires"] = num(d.Expires.UnixMicro())
	item["TTL"] = num(d.Expires.Unix() + 1)
	_, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(s.table), Item: item})
	if err != nil {
		return fmt.Errorf("document %s: %w", d.Key, err)
	}
	return nil
}

func (s *Store) GetDocument(ctx context.Context, key string) (backends.Document, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table),
		Key: itemKey(docsPartition, docPrefix+key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return backends.Document{}, fmt.Errorf("document %s: %w", key, err)
	}
	d, ok := documentOf(out.Item, time.Now())
	if !ok {
		return backends.Document{}, fmt.Errorf("document %s: %w", key, backends.ErrNotFound)
	}
	return d, nil
}

func (s *Store) ListDocuments(ctx context.Context, prefix string) ([]backends.Document, error) {
	var out []backends.Document
	now := time.Now()
	in := &dynamodb.QueryInput{TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression:   aws.String("Id = :id AND begins_with(#sk, :p)"),
		ExpressionAttributeNames: map[string]string{"#sk": "Status"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":id": str(docsPartition), ":p": str(docPrefix + prefix)}}
	for {
		resp, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("documents under %s: %w", prefix, err)
		}
		for _, it := range resp.Items {
			if d, ok := documentOf(it, now); ok {
				out = append(out, d)
			}
		}
		if resp.LastEvaluatedKey == nil {
			return out, nil
		}
		in.ExclusiveStartKey = resp.LastEvaluatedKey
	}
}

// documentOf reads a document's item; false when there is none, or it
// expired at now.
func documentOf(it map[string]types.AttributeValue, now time.Time) (backends.Document, bool) {
	if it == nil {
		return backends.Document{}, false
	}
	d := backends.Document{Key: strings.TrimPrefix(getS(it, "Status"), docPrefix),
		Expires: time.UnixMicro(getN(it, "Expires")).UTC()}
	if v, ok := it["Value"].(*types.AttributeValueMemberB); ok {
		d.Value = v.Value
	}
	return d, d.Expires.After(now)
}
