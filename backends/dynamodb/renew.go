package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// batchStatements is the most statements BatchExecuteStatement takes.
const batchStatements = 25

// Renew reads the _META items of the messages and renews those held as r
// says, one batch of reads and one of conditional updates per 25 messages,
// the batches of 25 at once.
// An update is conditional on the revision read, and makes a new one, so
// that a restore that read the lease before it was renewed fails its own
// condition instead of taking the message from its live holder. A message
// another writer changed in between is read again.
func (s *Store) Renew(ctx context.Context, r backends.Renewal) ([]string, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	return eachChunkAtOnce(r.IDs, func(chunk []string) ([]string, error) {
		var renewed []string
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
		return renewed, nil
	})
}

// eachChunkAtOnce runs renew on ids 25 at a time, the chunks at once, and
// returns the ids they renewed, or the first error. One after another, the
// chunks of a relay holding hundreds of messages took longer than the
// third of a lease its renewals have (seen on DynamoDB Local under load).
func eachChunkAtOnce(ids []string, renew func(chunk []string) ([]string, error)) ([]string, error) {
	chunks := slices.Collect(slices.Chunk(ids, batchStatements))
	renewed := make([][]string, len(chunks))
	err := eachAtOnce(len(chunks), func(i int) error {
		var err error
		renewed[i], err = renew(chunks[i])
		return err
	})
	if err != nil {
		return nil, err
	}
	return slices.Concat(renewed...), nil
}

// readMetas reads the _META items of ids, in one batch of at most 25; an
// id without one is left out.
func (s *Store) readMetas(ctx context.Context, ids []string) ([]*meta, error) {
	keys := make([][2]string, len(ids))
	for i, id := range ids {
		keys[i] = [2]string{id, metaStatus}
	}
	items, err := s.readItems(ctx, keys)
	if err != nil {
		return nil, err
	}
	var metas []*meta
	for _, it := range items {
		m, err := metaFromItem(it)
		if err != nil {
			return nil, err
		}
		metas = append(metas, m)
	}
	return metas, nil
}

// readItems reads the items of keys (Id, Status), consistently, in one
// batch of at most 25, in their order; a key without an item is left out.
func (s *Store) readItems(ctx context.Context, keys [][2]string) ([]map[string]types.AttributeValue, error) {
	reqs := make([]types.BatchStatementRequest, len(keys))
	for i, k := range keys {
		reqs[i] = types.BatchStatementRequest{Statement: aws.String("SELECT * FROM " + s.from("") + ` WHERE "Id" = ? AND "Status" = ?`),
			Parameters: []types.AttributeValue{str(k[0]), str(k[1])}, ConsistentRead: aws.Bool(true)}
	}
	out, err := s.db.BatchExecuteStatement(ctx, &dynamodb.BatchExecuteStatementInput{Statements: reqs})
	if err != nil {
		return nil, err
	}
	var items []map[string]types.AttributeValue
	for i, resp := range out.Responses {
		if resp.Error != nil {
			return nil, fmt.Errorf("read %s: %s: %s", keys[i][0], resp.Error.Code, aws.ToString(resp.Error.Message))
		}
		if resp.Item != nil {
			items = append(items, resp.Item)
		}
	}
	return items, nil
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
		u := s.leaseUpdate(m, r.Until)
		reqs = append(reqs, types.BatchStatementRequest{Statement: u.Statement, Parameters: u.Parameters})
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

// leaseUpdate moves the lease of m, read in a working status, to until,
// conditionally on the revision read, and makes a new one (see Renew).
func (s *Store) leaseUpdate(m *meta, until time.Time) types.ParameterizedStatement {
	renewed := m.msg
	renewed.LeaseUntil = until
	return stmt("UPDATE "+s.from("")+` SET "Attributes"."LeaseUntil" = ? SET "Attributes"."Seq" = ? SET "QueueKey" = ?`+
		` WHERE "Id" = ? AND "Status" = ? AND "Attributes"."Latest" = ? AND "Attributes"."Seq" = ?`,
		tm(until), num(m.seq+1), str(queueKey(&renewed)), str(m.msg.ID), str(metaStatus), str(string(m.msg.Status)), num(m.seq))
}

// RenewEvents renews, 25 events at a time and the 25s at once, those r renews: each event and,
// when r says so, its message, in one transaction for the 25. An event's
// update is conditional on the lease read, its message's on the revision
// read, as Renew's; when another writer changed one in between, the 25 are
// read again.
func (s *Store) RenewEvents(ctx context.Context, r backends.EventRenewal) ([]string, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	return eachChunkAtOnce(r.IDs, func(chunk []string) ([]string, error) {
		for attempt := 1; ; attempt++ {
			ok, err := s.renewEvents(ctx, r, chunk)
			switch {
			case errors.Is(err, errCondition) && attempt < 3:
				continue
			case errors.Is(err, errCondition):
				// Not refused: the holder must not take them for lost.
				return nil, fmt.Errorf("renew the leases of calling events: %d events kept changing while they were renewed", len(chunk))
			case err != nil:
				return nil, fmt.Errorf("renew the leases of calling events: %w", err)
			}
			return ok, nil
		}
	})
}

// renewEvents reads the events of ids (at most 25) and their messages, and
// renews those r renews in one transaction; errCondition when another
// writer changed one since it was read.
func (s *Store) renewEvents(ctx context.Context, r backends.EventRenewal, ids []string) ([]string, error) {
	events, err := s.readEvents(ctx, ids)
	if err != nil {
		return nil, err
	}
	var held []*backends.Event
	var owners []string
	for _, e := range events {
		if r.Renews(e) {
			held = append(held, e)
			owners = append(owners, e.MessageID)
		}
	}
	if len(held) == 0 {
		return nil, nil
	}
	slices.Sort(owners)
	metas, err := s.readMetas(ctx, slices.Compact(owners))
	if err != nil {
		return nil, err
	}
	byID := make(map[string]*meta, len(metas))
	for _, m := range metas {
		byID[m.msg.ID] = m
	}
	var stmts []types.ParameterizedStatement
	renewed := make([]string, len(held))
	for i, e := range held {
		after := *e
		after.LeaseUntil = r.Until
		stmts = append(stmts, s.eventUpdate(&after, e))
		if m, ok := byID[e.MessageID]; ok && m.hasSeq && r.RenewsMessage(e, &m.msg) {
			stmts = append(stmts, s.leaseUpdate(m, r.Until))
			delete(byID, e.MessageID) // one update of an item per transaction
		}
		renewed[i] = e.ID
	}
	if _, err := s.txn(ctx, stmts); err != nil {
		return nil, err
	}
	return renewed, nil
}

// readEvents reads the events of ids (at most 25) through the items that
// point at them, consistently; an id without an event is left out.
func (s *Store) readEvents(ctx context.Context, ids []string) ([]*backends.Event, error) {
	keys := make([][2]string, len(ids))
	for i, id := range ids {
		keys[i] = [2]string{eventRef(id), eventRefStatus}
	}
	refs, err := s.readItems(ctx, keys)
	if err != nil || len(refs) == 0 {
		return nil, err
	}
	keys = keys[:0]
	for _, ref := range refs {
		a := getM(ref, "Attributes")
		keys = append(keys, [2]string{getS(a, "MessageId"), eventKey(getN(a, "Seq"))})
	}
	items, err := s.readItems(ctx, keys)
	if err != nil {
		return nil, err
	}
	events := make([]*backends.Event, len(items))
	for i, it := range items {
		events[i] = eventFromItem(it)
	}
	return events, nil
}
