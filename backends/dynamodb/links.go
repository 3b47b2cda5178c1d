package dynamodb

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// A link is an item of its own (Id "_LINK#key", Status "_LINK") naming
// its message; it expires with the message's TTL, and a link whose
// message was purged reads as none.
const (
	linkPrefix = "_LINK#"
	linkStatus = "_LINK"
)

func linkKey(key string) map[string]types.AttributeValue {
	return itemKey(linkPrefix+key, linkStatus)
}

func (s *Store) Link(ctx context.Context, key, messageID string) error {
	if err := backends.CheckLinkKey(key); err != nil {
		return err
	}
	m, err := s.getMeta(ctx, messageID)
	if err != nil {
		return fmt.Errorf("link %s: %w", key, err)
	}
	item := linkKey(key)
	item["MessageId"] = str(messageID)
	if m.msg.TTL != nil {
		item["TTL"] = num(*m.msg.TTL)
	}
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:           aws.String(s.table),
		Item:                item,
		ConditionExpression: aws.String("attribute_not_exists(Id)"),
	})
	// The first link of a key stays.
	var taken *types.ConditionalCheckFailedException
	if err != nil && !errors.As(err, &taken) {
		return err
	}
	return nil
}

func (s *Store) Linked(ctx context.Context, key string) (string, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: linkKey(key), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return "", err
	}
	id := getS(out.Item, "MessageId")
	if id == "" {
		return "", fmt.Errorf("link %s: %w", key, backends.ErrNotFound)
	}
	if _, err := s.getMeta(ctx, id); err != nil {
		return "", fmt.Errorf("link %s: %w", key, err)
	}
	return id, nil
}
