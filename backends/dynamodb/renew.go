package dynamodb

import (
	"context"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// batchStatements is the most statements BatchExecuteStatement takes.
const batchStatements = 25

// Renew reads the _META items of the messages and renews those held as r
// says, one batch of reads and one of conditional updates per 25 messages.
// An update is conditional on the revision read, and makes a new one, so
// that a restore that read the lease before it was renewed fails its own
// condition instead of taking the message from its live holder. A message
// another writer changed in between is read again.
func (s *Store) Renew(ctx context.Context, r backends.Renewal) ([]string, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	var renewed []string
	for chunk := range slices.Chunk(r.IDs, batchStatements) {
		for attempt := 1; len(chunk) > 0; attempt++ {
			metas, err := s.readMetas(ctx, chunk)
			if err != nil {
				return nil, fmt.Errorf("renew leases in %s: %w", r.Status, err)
			}
			ok, conflicted, err := s.renewMetas(ctx, r, metas)
			if err != nil {
				return nil, fmt.Errorf("renew leases in %s: %w", r.Status, err)
			}
			renewed = append(renewed, ok...)
			if len(conflicted) > 0 && attempt == 3 {
				// Not refused: the holder must not take them for lost.
				return nil, fmt.Errorf("renew leases in %s: %d messages kept changing while they were renewed", r.Status, len(conflicted))
			}
			chunk = conflicted
		}
	}
	return renewed, nil
}

// readMetas reads the _META items of ids, in one batch of at most 25; an
// id without one is left out.
func (s *Store) readMetas(ctx context.Context, ids []string) ([]*meta, error) {
	reqs := make([]types.BatchStatementRequest, len(ids))
	for i, id := range ids {
		reqs[i] = types.BatchStatementRequest{Statement: aws.String("SELECT * FROM " + s.from("") + ` WHERE "Id" = ? AND "Status" = ?`),
			Parameters: []types.AttributeValue{str(id), str(metaStatus)}, ConsistentRead: aws.Bool(true)}
	}
	out, err := s.db.BatchExecuteStatement(ctx, &dynamodb.BatchExecuteStatementInput{Statements: reqs})
	if err != nil {
		return nil, err
	}
	var metas []*meta
	for i, resp := range out.Responses {
		if resp.Error != nil {
			return nil, fmt.Errorf("read %s: %s: %s", ids[i], resp.Error.Code, aws.ToString(resp.Error.Message))
		}
		if resp.Item == nil {
			continue
		}
		m, err := metaFromItem(resp.Item)
		if err != nil {
			return nil, err
		}
		metas = append(metas, m)
	}
	return metas, nil
}

// renewMetas renews the messages of metas that r renews, in one batch;
// conflicted are those another writer changed since they were read.
func (s *Store) renewMetas(ctx context.Context, r backends.Renewal, metas []*meta) (ok, conflicted []string, err error) {
	var reqs []types.BatchStatementRequest
	var ids []string
	for _, m := range metas {
		if !m.hasSeq || !r.Renews(&m.msg) {
			continue
		}
		renewed := m.msg
		renewed.LeaseUntil = r.Until
		reqs = append(reqs, types.BatchStatementRequest{
			Statement: aws.String("UPDATE " + s.from("") + ` SET "Attributes"."LeaseUntil" = ? SET "Attributes"."Seq" = ? SET "QueueKey" = ?` +
				` WHERE "Id" = ? AND "Status" = ? AND "Attributes"."Latest" = ? AND "Attributes"."Seq" = ?`),
			Parameters: []types.AttributeValue{tm(r.Until), num(m.seq + 1), str(queueKey(&renewed)),
				str(m.msg.ID), str(metaStatus), str(string(r.Status)), num(m.seq)}})
		ids = append(ids, m.msg.ID)
	}
	if len(reqs) == 0 {
		return nil, nil, nil
	}
	out, err := s.db.BatchExecuteStatement(ctx, &dynamodb.BatchExecuteStatementInput{Statements: reqs})
	if err != nil {
		return nil, nil, err
	}
	for i, resp := range out.Responses {
		switch {
		case resp.Error == nil:
			ok = append(ok, ids[i])
		case resp.Error.Code == types.BatchStatementErrorCodeEnumConditionalCheckFailed,
			resp.Error.Code == types.BatchStatementErrorCodeEnumTransactionConflict:
			conflicted = append(conflicted, ids[i])
		default:
			return nil, nil, fmt.Errorf("renew %s: %s: %s", ids[i], resp.Error.Code, aws.ToString(resp.Error.Message))
		}
	}
	return ok, conflicted, nil
}
