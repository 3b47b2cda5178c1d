package dynamodb

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

func (s *Store) SuspendBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	_, err := s.txn(ctx, []types.ParameterizedStatement{s.insert(map[string]types.AttributeValue{
		"Id": str(batchPrefix + code), "Status": str(batchStatus),
		"Attributes": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"SuspendedAt": tm(time.Now())}},
	})})
	if errors.Is(err, errDupItem) {
		return nil
	}
	return err
}

func (s *Store) ActivateBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	_, err := s.db.ExecuteStatement(ctx, &dynamodb.ExecuteStatementInput{
		Statement:  aws.String("DELETE FROM " + s.from("") + ` WHERE "Id" = ? AND "Status" = ?`),
		Parameters: []types.AttributeValue{str(batchPrefix + code), str(batchStatus)},
	})
	return err
}

func (s *Store) SuspendedBatches(ctx context.Context) ([]string, error) {
	items, err := s.query(ctx, "SELECT * FROM "+s.from("StatusIndex")+` WHERE "Status" = ?`, 0, str(batchStatus))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, it := range items {
		out = append(out, strings.TrimPrefix(getS(it, "Id"), batchPrefix))
	}
	sort.Strings(out)
	return out, nil
}
