// Package dynamodbtest holds what tests of a DynamoDB outbox share.
package dynamodbtest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// SeedTable creates table in the seed's shape (keys Id and Status, the
// seed's StatusIndex) and deletes it when t ends, once its indexes are
// built: DynamoDB Local stops building indexes for good when a table is
// deleted while one is, so a table whose index is still being built after
// two minutes is left behind, and said so.
func SeedTable(t testing.TB, client *dynamodb.Client, table string) {
	t.Helper()
	ctx := context.Background()
	key := func(hash, rng string) []types.KeySchemaElement {
		return []types.KeySchemaElement{{AttributeName: aws.String(hash), KeyType: types.KeyTypeHash}, {AttributeName: aws.String(rng), KeyType: types.KeyTypeRange}}
	}
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(table), BillingMode: types.BillingModePayPerRequest, KeySchema: key("Id", "Status"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("Id"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("Status"), AttributeType: types.ScalarAttributeTypeS}},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{IndexName: aws.String("StatusIndex"), KeySchema: key("Status", "Id"),
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			desc, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
			if err != nil {
				return
			}
			building := slices.ContainsFunc(desc.Table.GlobalSecondaryIndexes, func(g types.GlobalSecondaryIndexDescription) bool {
				return g.IndexStatus != types.IndexStatusActive
			})
			if !building {
				client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
				return
			}
			if time.Now().After(deadline) {
				t.Logf("table %s left behind: an index is still being built", table)
				return
			}
		}
	})
}
