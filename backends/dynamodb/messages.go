package dynamodb

import (
	"context"
	"encoding/base64"
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

// Create writes the _META item, the ACCEPTED item, the count and the
// message's bytes when it has them (bodies.go) in one transaction. A
// message of a suspended batch is held from the start, on condition that
// the batch is still suspended when it is written.
func (s *Store) Create(ctx context.Context, msg *backends.Message) error {
	if err := msg.PrepareCreate(time.Now().UTC()); err != nil {
		return err
	}
	msg.Version = 0
	ttl := s.ttlFor(msg.CreatedAt)
	msg.TTL = ttl
	var body []types.ParameterizedStatement
	chunks := 0
	if msg.Body != nil {
		var err error
		if body, chunks, err = s.spoolBody(ctx, msg, ttl); err != nil {
			return err
		}
	}
	for attempt := 1; ; attempt++ {
		m := &meta{msg: *msg, seq: 1, reached: map[string]int64{string(backends.StatusAccepted): 1}}
		var held []types.ParameterizedStatement
		if msg.Batch != "" {
			suspended, err := s.batchSuspended(ctx, msg.Batch)
			if err != nil {
				return fmt.Errorf("create message %s: %w", msg.ID, err)
			}
			if suspended {
				m.held = true
				held = append(held, s.whileSuspended(msg.Batch))
			}
		}
		item := indexKeys(m)
		item["Id"], item["Status"] = str(msg.ID), str(metaStatus)
		item["Attributes"] = &types.AttributeValueMemberM{Value: m.attributes()}
		item["Version"] = num(0)
		if msg.MessageID != "" {
			item["MsgId"] = str(msg.MessageID)
		}
		if ttl != nil {
			item["TTL"] = num(*ttl)
		}
		if chunks > 0 {
			item["BodyChunks"] = num(int64(chunks))
		}
		stmts := append([]types.ParameterizedStatement{
			s.insert(item),
			s.insert(s.statusItem(msg.ID, backends.StatusAccepted, 1, 1, msg.Reason, msg.CreatedAt, nil, ttl)),
		}, body...)
		var c backends.Changes
		c.Created(msg)
		counters, err := s.counterStmts(ctx, &c)
		if err != nil {
			return fmt.Errorf("create message %s: %w", msg.ID, err)
		}
		stmts = append(append(stmts, counters...), held...)
		i, err := s.txn(ctx, stmts)
		switch {
		case errors.Is(err, errDupItem):
			return fmt.Errorf("create message %s: %w", msg.ID, backends.ErrDuplicate)
		case errors.Is(err, errCondition) && i == 2 && msg.Body != nil:
			return fmt.Errorf("create message %s: its bytes waited too long and were given up; submit it again", msg.ID)
		case errors.Is(err, errCondition) && i == len(stmts)-1 && attempt < 10:
			continue // the batch was activated meanwhile
		case err != nil:
			return fmt.Errorf("create message %s: %w", msg.ID, err)
		}
		// The relay that creates a message moves it next (intake's
		// hand-over): as written, it need not be read first.
		m.hasSeq, m.ttl, m.msg.Body = true, ttl, nil
		s.recent.remember(m)
		return nil
	}
}

func (s *Store) History(ctx context.Context, id string) ([]backends.HistoryEntry, error) {
	// Up to _META: not the message's bytes, which sort after it.
	items, err := s.query(ctx, "SELECT * FROM "+s.from("")+` WHERE "Id" = ? AND "Status" <= ?`, 0, str(id), str(metaStatus))
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

// List reads the _META items from MetaIndex, every shard at once, merged
// in id order (newest first without a status: ids are time-ordered UUIDs
// unless the app gave its own), with the status in Attributes.Latest as
// the seed's StatusIndex has it; those of a batch from BatchIndex, its two
// partitions (batchParts) at once, in id order. The cursor is the last id
// of the page.
func (s *Store) List(ctx context.Context, q backends.ListQuery) ([]*backends.Message, string, error) {
	q.Limit = q.PageSize()
	in := &dynamodb.QueryInput{IndexName: aws.String("MetaIndex"), ScanIndexForward: aws.Bool(q.Status != ""),
		ExpressionAttributeNames: map[string]string{"#p": "MetaShard"}, ExpressionAttributeValues: map[string]types.AttributeValue{}}
	parts := shardsOf(metaStatus)
	if q.Batch != "" {
		in.IndexName, in.ScanIndexForward, in.ExpressionAttributeNames["#p"] = aws.String("BatchIndex"), aws.Bool(true), "BatchKey"
		parts = batchParts(q.Batch)
	}
	in.KeyConditionExpression = aws.String("#p = :p")
	if q.After != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.After)
		if err != nil || len(b) == 0 {
			return nil, "", fmt.Errorf("list cursor %q was not given by this store: %w", q.After, backends.ErrBadCursor)
		}
		op := ">"
		if !*in.ScanIndexForward {
			op = "<"
		}
		in.KeyConditionExpression = aws.String("#p = :p AND Id " + op + " :after")
		in.ExpressionAttributeValues[":after"] = str(string(b))
	}
	if q.Status != "" {
		in.FilterExpression = aws.String("#a.Latest = :st")
		in.ExpressionAttributeNames["#a"] = "Attributes"
		in.ExpressionAttributeValues[":st"] = str(string(q.Status))
	}
	items, err := s.queryParts(ctx, in, parts, "Id", q.Limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list: %w", err)
	}
	more := len(items) > q.Limit
	items = items[:min(len(items), q.Limit)]
	out := make([]*backends.Message, 0, len(items))
	for _, it := range items {
		m, err := metaFromItem(it)
		if err != nil {
			return nil, "", err
		}
		out = append(out, &m.msg)
	}
	if !more {
		return out, "", nil
	}
	return out, base64.RawURLEncoding.EncodeToString([]byte(out[len(out)-1].ID)), nil
}
