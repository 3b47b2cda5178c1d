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
)

// indexes are the global secondary indexes the relay reads (see
// items.go), and the seed's StatusIndex when seed is set.
func indexes(seed bool) []types.GlobalSecondaryIndex {
	key := func(hash, rng string) []types.KeySchemaElement {
		k := []types.KeySchemaElement{{AttributeName: aws.String(hash), KeyType: types.KeyTypeHash}}
		if rng != "" {
			k = append(k, types.KeySchemaElement{AttributeName: aws.String(rng), KeyType: types.KeyTypeRange})
		}
		return k
	}
	out := []types.GlobalSecondaryIndex{
		{IndexName: aws.String("QueueIndex"), KeySchema: key("Queue", "QueueKey"),
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll}},
		{IndexName: aws.String(dueIndex), KeySchema: key("Queue", "DueKey"),
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll}},
		{IndexName: aws.String("MessageIdIndex"), KeySchema: key("MsgId", ""),
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly}},
		{IndexName: aws.String("MetaIndex"), KeySchema: key("MetaShard", "Id"),
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: []string{"Attributes", "TTL"}}},
		{IndexName: aws.String("BatchIndex"), KeySchema: key("BatchKey", "Id"),
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll}},
	}
	if seed {
		out = append(out, types.GlobalSecondaryIndex{IndexName: aws.String(seedIndex), KeySchema: key("Status", "Id"),
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: []string{"Attributes", "TTL"}}})
	}
	return out
}

// seedIndex is the seed's index by status. Every message writes its
// _META entry under one key of it, which caps the table's writes (on AWS,
// about a thousand a second for one key of an index), so the relay does
// not read it, and create-table makes it only when asked (Options.SeedIndex)
// for the seed's tools; it leaves it on a table that has it.
const seedIndex = "StatusIndex"

func attributes() []types.AttributeDefinition {
	var out []types.AttributeDefinition
	for _, name := range []string{"Id", "Status", "Queue", "QueueKey", "DueKey", "MsgId", "MetaShard", "BatchKey"} {
		out = append(out, types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: types.ScalarAttributeTypeS})
	}
	return out
}

// CreateTable creates the outbox table with its indexes, or adds the
// indexes a table of the seed's shape lacks, and turns TTL on. It returns
// the table's name and its indexes. On a table
// not yet prepared for this store it then places every message in its
// shards and counts them once, with a scan (initLayout): run it while no
// relay uses the table. It is safe to run on a table that has everything.
func CreateTable(ctx context.Context, opts Options) (string, []string, error) {
	client, table, err := Client(ctx, opts)
	if err != nil {
		return "", nil, err
	}
	desc, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	have := map[string]bool{}
	switch {
	case isNotFound(err):
		_, err = client.CreateTable(ctx, &dynamodb.CreateTableInput{
			TableName: aws.String(table),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String("Id"), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String("Status"), KeyType: types.KeyTypeRange},
			},
			AttributeDefinitions:   attributes(),
			GlobalSecondaryIndexes: indexes(opts.SeedIndex),
			BillingMode:            types.BillingModePayPerRequest,
		})
		if err != nil {
			return table, nil, fmt.Errorf("create table %s: %w", table, err)
		}
	case err != nil:
		return table, nil, fmt.Errorf("describe table %s: %w", table, err)
	default:
		for _, gsi := range desc.Table.GlobalSecondaryIndexes {
			have[aws.ToString(gsi.IndexName)] = true
		}
		for _, gsi := range indexes(opts.SeedIndex) {
			if have[aws.ToString(gsi.IndexName)] {
				continue
			}
			if err := waitActive(ctx, client, table); err != nil {
				return table, nil, err
			}
			_, err := client.UpdateTable(ctx, &dynamodb.UpdateTableInput{
				TableName: aws.String(table), AttributeDefinitions: attributes(),
				GlobalSecondaryIndexUpdates: []types.GlobalSecondaryIndexUpdate{{Create: &types.CreateGlobalSecondaryIndexAction{
					IndexName: gsi.IndexName, KeySchema: gsi.KeySchema, Projection: gsi.Projection}}},
			})
			if err != nil {
				return table, nil, fmt.Errorf("add index %s to %s: %w", aws.ToString(gsi.IndexName), table, err)
			}
		}
	}
	if err := waitActive(ctx, client, table); err != nil {
		return table, nil, err
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String("TTL"), Enabled: aws.Bool(true)}})
	if err != nil && !isTTLAlreadyOn(err) {
		return table, nil, fmt.Errorf("turn TTL on for %s: %w", table, err)
	}
	// The table's indexes: those it had, and those it was given.
	names := slices.Collect(maps.Keys(have))
	for _, gsi := range indexes(opts.SeedIndex) {
		if !have[aws.ToString(gsi.IndexName)] {
			names = append(names, aws.ToString(gsi.IndexName))
		}
	}
	slices.Sort(names)
	return table, names, initLayout(ctx, client, table, have[seedIndex])
}

func isTTLAlreadyOn(err error) bool {
	var ve interface{ ErrorMessage() string }
	return errors.As(err, &ve) && (strings.Contains(ve.ErrorMessage(), "already enabled") || strings.Contains(ve.ErrorMessage(), "already been enabled"))
}

// waitActive waits for the table and its indexes to be usable.
func waitActive(ctx context.Context, client *dynamodb.Client, table string) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		desc, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			return err
		}
		ready := desc.Table.TableStatus == types.TableStatusActive
		for _, gsi := range desc.Table.GlobalSecondaryIndexes {
			ready = ready && gsi.IndexStatus == types.IndexStatusActive
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("table %s is not active after 5 minutes", table)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkTable tells what is missing from the table, and the command that
// adds it. The layout item says it all at once: create-table writes it
// last, once the indexes are there. Only a table without it is described
// (DescribeTable is a control-plane call, limited to a few a second on AWS,
// and DynamoDB Local counts the items for it: seconds at 100,000).
func checkTable(ctx context.Context, client *dynamodb.Client, table string) error {
	if ok, err := layoutReady(ctx, client, table); ok {
		return nil
	} else if err != nil && !isNotFound(err) {
		return err
	}
	desc, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if isNotFound(err) {
		return fmt.Errorf("DynamoDB table %s does not exist; run: postino dynamodb create-table --table %s", table, table)
	}
	if err != nil {
		return fmt.Errorf("DynamoDB table %s: %w", table, err)
	}
	have := map[string]bool{}
	for _, gsi := range desc.Table.GlobalSecondaryIndexes {
		have[aws.ToString(gsi.IndexName)] = true
	}
	for _, gsi := range indexes(false) {
		if !have[aws.ToString(gsi.IndexName)] {
			return fmt.Errorf("DynamoDB table %s lacks the index %s; run: postino dynamodb create-table --table %s (it adds what is missing)",
				table, aws.ToString(gsi.IndexName), table)
		}
	}
	return errNoLayout(table)
}

// isNotFound reports whether DynamoDB said there is no such table.
func isNotFound(err error) bool {
	var nf *types.ResourceNotFoundException
	return errors.As(err, &nf)
}
