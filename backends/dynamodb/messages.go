package dynamodb

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

func (s *Store) Get(ctx context.Context, id string) (*backends.Message, error) {
	m, err := s.getMeta(ctx, id)
	if err != nil {
		return nil, err
	}
	return &m.msg, nil
}

func (s *Store) Create(ctx context.Context, msg *backends.Message) error {
	if err := msg.PrepareCreate(time.Now().UTC()); err != nil {
		return err
	}
	msg.Version = 0
	ttl := s.ttlFor(msg.CreatedAt)
	msg.TTL = ttl
	m := &meta{msg: *msg, seq: 1, reached: map[string]int64{string(backends.StatusAccepted): 1}}
	item := map[string]types.AttributeValue{
		"Id": str(msg.ID), "Status": str(metaStatus), "Attributes": &types.AttributeValueMemberM{Value: m.attributes()},
		"Version": num(0), "Queue": str(string(msg.Status)), "QueueKey": str(queueKey(msg)),
	}
	if msg.MessageID != "" {
		item["MsgId"] = str(msg.MessageID)
	}
	if ttl != nil {
		item["TTL"] = num(*ttl)
	}
	_, err := s.txn(ctx, []types.ParameterizedStatement{
		s.insert(item),
		s.insert(s.statusItem(msg.ID, backends.StatusAccepted, 1, 1, msg.Reason, msg.CreatedAt, nil, ttl)),
	})
	if errors.Is(err, errDupItem) {
		return fmt.Errorf("create message %s: %w", msg.ID, backends.ErrDuplicate)
	}
	if err != nil {
		return fmt.Errorf("create message %s: %w", msg.ID, err)
	}
	return nil
}

// change is a transition prepared against the _META item as read.
func (s *Store) History(ctx context.Context, id string) ([]backends.HistoryEntry, error) {
	items, err := s.query(ctx, "SELECT * FROM "+s.from("")+` WHERE "Id" = ?`, 0, str(id))
	if err != nil {
		return nil, err
	}
	type row struct {
		e   backends.HistoryEntry
		seq int64
	}
	var rows []row
	found := false
	for _, it := range items {
		if getS(it, "Status") == metaStatus {
			found = true
		}
		if e, seq, ok := historyFromItem(it); ok {
			rows = append(rows, row{e, seq})
		}
	}
	if !found {
		return nil, fmt.Errorf("message %s: %w", id, backends.ErrNotFound)
	}
	// Legacy items carry no sequence: their time orders them.
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].seq != rows[j].seq {
			return rows[i].seq < rows[j].seq
		}
		return rows[i].e.At.Before(rows[j].e.At)
	})
	out := make([]backends.HistoryEntry, len(rows))
	for i, r := range rows {
		out[i] = r.e
	}
	return out, nil
}

func (s *Store) ByMessageID(ctx context.Context, messageID string) ([]*backends.Message, error) {
	items, err := s.query(ctx, "SELECT * FROM "+s.from("MessageIdIndex")+` WHERE "MsgId" = ?`, 0, str(messageID))
	if err != nil {
		return nil, err
	}
	var out []*backends.Message
	for _, it := range items {
		m, err := s.Get(ctx, getS(it, "Id"))
		if errors.Is(err, backends.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}

// List reads messages by status the seed's way: the StatusIndex, with the
// status in Attributes.Latest, page by page with NextToken (the cursor), in
// id order. Without a status it walks the same index backwards, newest id
// first (ids are time-ordered UUIDs unless the app gave its own).
func (s *Store) List(ctx context.Context, q backends.ListQuery) ([]*backends.Message, string, error) {
	q.Limit = q.PageSize()
	if q.Status == "" {
		return s.listAll(ctx, q)
	}
	text := "SELECT * FROM " + s.from("StatusIndex") + ` WHERE "Status" = ? AND "Attributes"."Latest" = ?`
	params := []types.AttributeValue{str(metaStatus), str(string(q.Status))}
	var next *string
	if q.After != "" {
		next = aws.String(q.After)
	}
	var out []*backends.Message
	for len(out) < q.Limit {
		resp, err := s.db.ExecuteStatement(ctx, &dynamodb.ExecuteStatementInput{
			Statement: aws.String(text), Parameters: params, NextToken: next, Limit: aws.Int32(int32(q.Limit - len(out))),
		})
		if err != nil {
			return nil, "", fmt.Errorf("list: %w", err)
		}
		for _, it := range resp.Items {
			m, err := metaFromItem(it)
			if err != nil {
				return nil, "", err
			}
			out = append(out, &m.msg)
		}
		next = resp.NextToken
		if next == nil {
			return out, "", nil
		}
	}
	return out, aws.ToString(next), nil
}

func (s *Store) listAll(ctx context.Context, q backends.ListQuery) ([]*backends.Message, string, error) {
	var start map[string]types.AttributeValue
	if q.After != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.After)
		if err != nil || len(b) == 0 {
			return nil, "", fmt.Errorf("list cursor %q was not given by this store", q.After)
		}
		var k struct{ Id, Status string }
		if err := json.Unmarshal(b, &k); err != nil {
			return nil, "", fmt.Errorf("list cursor %q was not given by this store", q.After)
		}
		start = map[string]types.AttributeValue{"Id": str(k.Id), "Status": str(k.Status)}
	}
	var out []*backends.Message
	for len(out) < q.Limit {
		resp, err := s.db.Query(ctx, &dynamodb.QueryInput{
			TableName: aws.String(s.table), IndexName: aws.String("StatusIndex"), ScanIndexForward: aws.Bool(false),
			KeyConditionExpression:    aws.String("#s = :m"),
			ExpressionAttributeNames:  map[string]string{"#s": "Status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{":m": str(metaStatus)},
			Limit:                     aws.Int32(int32(q.Limit - len(out))), ExclusiveStartKey: start,
		})
		if err != nil {
			return nil, "", fmt.Errorf("list: %w", err)
		}
		for _, it := range resp.Items {
			m, err := metaFromItem(it)
			if err != nil {
				return nil, "", err
			}
			out = append(out, &m.msg)
		}
		if resp.LastEvaluatedKey == nil {
			return out, "", nil
		}
		start = resp.LastEvaluatedKey
	}
	b, _ := json.Marshal(struct{ Id, Status string }{getS(start, "Id"), getS(start, "Status")})
	return out, base64.RawURLEncoding.EncodeToString(b), nil
}

func (s *Store) Counts(ctx context.Context) (map[backends.Status]int, error) {
	out := map[backends.Status]int{}
	for _, st := range backends.Statuses() {
		var start map[string]types.AttributeValue
		for {
			resp, err := s.db.Query(ctx, &dynamodb.QueryInput{
				TableName: aws.String(s.table), IndexName: aws.String("QueueIndex"), Select: types.SelectCount,
				KeyConditionExpression:    aws.String("#q = :s"),
				ExpressionAttributeNames:  map[string]string{"#q": "Queue"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":s": str(string(st))},
				ExclusiveStartKey:         start,
			})
			if err != nil {
				return nil, err
			}
			out[st] += int(resp.Count)
			if resp.LastEvaluatedKey == nil {
				break
			}
			start = resp.LastEvaluatedKey
		}
		if out[st] == 0 {
			delete(out, st)
		}
	}
	return out, nil
}

// lowKey is below every QueueKey (a key may not be empty).
