package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// Adopt takes over the messages of the seed layout the table holds (their
// _META item has no Envelope: the seed kept it in a payload file), after
// CreateTable placed and counted them, so that none waits for ever unseen
// (backends.SeedAdoption says how). A message is moved in one transaction
// with its counters, conditionally on the state it was read in. It can run
// again: a message taken over has its Envelope, and is not found again
// unless it needed no move.
func Adopt(ctx context.Context, opts Options) (backends.Adoption, error) {
	client, table, err := Client(ctx, opts)
	if err != nil {
		return backends.Adoption{}, err
	}
	if ok, err := layoutReady(ctx, client, table); !ok || err != nil {
		if err == nil {
			err = errNoLayout(table)
		}
		return backends.Adoption{}, err
	}
	return adopt(ctx, client, table)
}

func adopt(ctx context.Context, client *dynamodb.Client, table string) (backends.Adoption, error) {
	s := &Store{db: client, table: table}
	a := backends.Adoption{Found: map[backends.Status]int{}}
	in := &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		FilterExpression:          aws.String("#s = :meta AND attribute_not_exists(#a.Envelope)"),
		ExpressionAttributeNames:  map[string]string{"#s": "Status", "#a": "Attributes"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":meta": str(metaStatus)}}
	for {
		resp, err := client.Scan(ctx, in)
		if err != nil {
			return a, fmt.Errorf("scan %s for the seed's messages: %w", table, err)
		}
		for _, it := range resp.Items {
			m, err := metaFromItem(it)
			if err != nil {
				return a, err
			}
			a.Found[m.msg.Status]++
			kind, err := s.adoptOne(ctx, m)
			if err != nil {
				return a, fmt.Errorf("take over message %s of the seed layout: %w", m.msg.ID, err)
			}
			a.Count(kind)
		}
		if resp.LastEvaluatedKey == nil {
			return a, nil
		}
		in.ExclusiveStartKey = resp.LastEvaluatedKey
	}
}

// adoptOne makes the move that takes m over, with the statuses the seed's
// items say it reached, so that its new status items do not collide with
// them.
func (s *Store) adoptOne(ctx context.Context, m *meta) (backends.Adopted, error) {
	told, err := s.readReached(ctx, m)
	if err != nil {
		return backends.AdoptedNone, err
	}
	if told && !m.msg.Status.Undelivered() {
		return backends.AdoptedNone, nil // its outcome has its event already
	}
	t, kind := backends.SeedAdoption(&m.msg, time.Now().UTC())
	if t == nil {
		return kind, nil
	}
	c, err := s.prepare(m, *t)
	if err != nil {
		return backends.AdoptedNone, err
	}
	var moved backends.Changes
	moved.Moved(t)
	counters, err := s.counterStmts(ctx, &moved)
	if err != nil {
		return backends.AdoptedNone, err
	}
	if _, err := s.txn(ctx, append(c.stmts, counters...)); errors.Is(err, errCondition) {
		return backends.AdoptedNone, nil // changed meanwhile: no longer the seed's
	} else if err != nil {
		return backends.AdoptedNone, err
	}
	return kind, nil
}

// readReached fills m's count of the statuses reached from its status
// items, and says whether it has events. It reads their keys only, up to
// _META: not the message's bytes, which sort after it.
func (s *Store) readReached(ctx context.Context, m *meta) (events bool, err error) {
	items, err := s.query(ctx, `SELECT "Status" FROM `+s.from("")+` WHERE "Id" = ? AND "Status" < ?`, 0, str(m.msg.ID), str(metaStatus))
	if err != nil {
		return false, err
	}
	for _, it := range items {
		sk := getS(it, "Status")
		if strings.HasPrefix(sk, eventPrefix) {
			events = true
			continue
		}
		if _, _, ok := historyFromItem(it); ok {
			st, _, _ := strings.Cut(sk, "#")
			m.reached[st]++
		}
	}
	return events, nil
}
