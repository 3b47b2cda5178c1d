package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// A mailbox cursor is an item of its own (Id "_CURSOR#name", Status
// "_CURSOR") with top-level attributes, so that a conditional update can
// take the lease: the item need not exist first.
const (
	cursorPrefix = "_CURSOR#"
	cursorStatus = "_CURSOR"
)

func cursorKey(name string) map[string]types.AttributeValue {
	return itemKey(cursorPrefix+name, cursorStatus)
}

func (s *Store) ClaimCursor(ctx context.Context, name, owner string, until time.Time) (backends.Cursor, error) {
	if err := backends.CheckCursorName(name); err != nil {
		return backends.Cursor{}, err
	}
	held, found, err := s.getCursor(ctx, name)
	if err != nil {
		return backends.Cursor{}, err
	}
	c, err := held.Claim(owner, until, time.Now())
	if err != nil {
		return backends.Cursor{}, err
	}
	// Written on condition that nobody claimed it since it was read.
	in := &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      cursorKey(name),
		UpdateExpression:         aws.String("SET #owner = :owner, LeaseUntil = :until"),
		ConditionExpression:      aws.String("attribute_not_exists(Id)"),
		ExpressionAttributeNames: map[string]string{"#owner": "Owner"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":owner": str(owner), ":until": num(c.LeaseUntil.UnixNano()),
		},
		// The cursor as written: the previous owner may have saved since it
		// was read, and where it got to must not be lost.
		ReturnValues: types.ReturnValueAllNew,
	}
	if found {
		in.ConditionExpression = aws.String("#owner = :held AND LeaseUntil = :heldUntil")
		in.ExpressionAttributeValues[":held"] = str(held.Owner)
		in.ExpressionAttributeValues[":heldUntil"] = num(held.LeaseUntil.UnixNano())
	}
	out, err := s.db.UpdateItem(ctx, in)
	if err != nil {
		return backends.Cursor{}, cursorErr(err)
	}
	return cursorOf(out.Attributes), nil
}

func (s *Store) SaveCursor(ctx context.Context, name, owner string, c backends.Cursor) error {
	held, found, err := s.getCursor(ctx, name)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("cursor %s was never claimed: %w", name, backends.ErrLockNotAcquired)
	}
	next, err := held.Save(owner, c)
	if err != nil {
		return err
	}
	// Written on condition that owner still holds it.
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      cursorKey(name),
		UpdateExpression:         aws.String("SET UIDValidity = :v, LastUID = :l"),
		ConditionExpression:      aws.String("#owner = :owner"),
		ExpressionAttributeNames: map[string]string{"#owner": "Owner"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":owner": str(owner),
			":v":     &types.AttributeValueMemberN{Value: strconv.FormatUint(uint64(next.UIDValidity), 10)},
			":l":     &types.AttributeValueMemberN{Value: strconv.FormatUint(uint64(next.LastUID), 10)},
		},
	})
	return cursorErr(err)
}

func (s *Store) ReadCursor(ctx context.Context, name string) (backends.Cursor, error) {
	c, _, err := s.getCursor(ctx, name)
	return c, err
}

// getCursor reads a cursor; found is false when it was never claimed.
func (s *Store) getCursor(ctx context.Context, name string) (c backends.Cursor, found bool, err error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: cursorKey(name), ConsistentRead: aws.Bool(true)})
	if err != nil || out.Item == nil {
		return c, false, err
	}
	return cursorOf(out.Item), true, nil
}

func cursorOf(a map[string]types.AttributeValue) backends.Cursor {
	return backends.Cursor{UIDValidity: uint32(getN(a, "UIDValidity")), LastUID: uint32(getN(a, "LastUID")),
		Owner: getS(a, "Owner"), LeaseUntil: time.Unix(0, getN(a, "LeaseUntil")).UTC()}
}

// cursorErr tells a cursor that moved since it was read (another relay
// claimed it) from a failure of the store.
func cursorErr(err error) error {
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return fmt.Errorf("cursor claimed by another relay meanwhile: %w", backends.ErrLockNotAcquired)
	}
	return err
}
