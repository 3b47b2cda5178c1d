package dynamodb

import (
	"context"
	"errors"
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
	return map[string]types.AttributeValue{"Id": str(cursorPrefix + name), "Status": str(cursorStatus)}
}

func (s *Store) ClaimCursor(ctx context.Context, name, owner string, until time.Time) (backends.Cursor, error) {
	if err := backends.CheckCursorName(name); err != nil {
		return backends.Cursor{}, err
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      cursorKey(name),
		UpdateExpression:         aws.String("SET #owner = :owner, LeaseUntil = :until"),
		ConditionExpression:      aws.String("attribute_not_exists(Id) OR #owner = :owner OR LeaseUntil < :now"),
		ExpressionAttributeNames: map[string]string{"#owner": "Owner"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":owner": str(owner), ":until": num(until.UnixNano()), ":now": num(time.Now().UnixNano()),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if err := cursorErr(err); err != nil {
		return backends.Cursor{}, err
	}
	a := out.Attributes
	return backends.Cursor{UIDValidity: uint32(getN(a, "UIDValidity")), LastUID: uint32(getN(a, "LastUID")),
		Owner: getS(a, "Owner"), LeaseUntil: time.Unix(0, getN(a, "LeaseUntil")).UTC()}, nil
}

func (s *Store) SaveCursor(ctx context.Context, name, owner string, c backends.Cursor) error {
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(s.table),
		Key:                      cursorKey(name),
		UpdateExpression:         aws.String("SET UIDValidity = :v, LastUID = :l"),
		ConditionExpression:      aws.String("#owner = :owner"),
		ExpressionAttributeNames: map[string]string{"#owner": "Owner"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":owner": str(owner),
			":v":     &types.AttributeValueMemberN{Value: strconv.FormatUint(uint64(c.UIDValidity), 10)},
			":l":     &types.AttributeValueMemberN{Value: strconv.FormatUint(uint64(c.LastUID), 10)},
		},
	})
	return cursorErr(err)
}

func cursorErr(err error) error {
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return backends.ErrLockNotAcquired
	}
	return err
}
