// Package dynamodb is the outbox in a DynamoDB table, in the seed's single
// table layout (see items.go), written with PartiQL: every transition is one
// ExecuteTransaction of the _META update, conditional on the expected
// status, and the insert of the new status item.
package dynamodb

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
)

// Options tune the store.
type Options struct {
	// Table is the table's name; empty takes EMAIL_OUTBOX_TABLE, as the
	// seed does.
	Table string
	// Endpoint overrides AWS_ENDPOINT_URL, for DynamoDB Local.
	Endpoint string
	// Region defaults to AWS_REGION, then us-east-1.
	Region string
	// TTL is how long after its last change a message's items may expire;
	// zero writes no TTL.
	TTL time.Duration
}

// Store is an outbox in DynamoDB.
type Store struct {
	db    *dynamodb.Client
	table string
	ttl   time.Duration
}

var _ backends.Outbox = (*Store)(nil)

// Client makes a DynamoDB client from the options and the environment.
func Client(ctx context.Context, opts Options) (*dynamodb.Client, string, error) {
	table := opts.Table
	if table == "" {
		table = os.Getenv("EMAIL_OUTBOX_TABLE")
	}
	if table == "" {
		return nil, "", errors.New("no DynamoDB table: give --table or set EMAIL_OUTBOX_TABLE")
	}
	var loadOpts []func(*config.LoadOptions) error
	if opts.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(opts.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, "", fmt.Errorf("AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		// Throttling and 5xx answers are retried by the SDK with jittered
		// exponential backoff; give it room before an error surfaces.
		o.RetryMaxAttempts = 10
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
		if opts.Endpoint != "" || os.Getenv("AWS_ENDPOINT_URL") != "" {
			// DynamoDB Local sometimes sends a CRC32 header that does not
			// match its own body.
			o.DisableValidateResponseChecksum = true
		}
	})
	return client, table, nil
}

// Open opens the store; the table must exist with its indexes.
func Open(ctx context.Context, opts Options) (*Store, error) {
	client, table, err := Client(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := checkTable(ctx, client, table); err != nil {
		return nil, err
	}
	return &Store{db: client, table: table, ttl: opts.TTL}, nil
}

func (s *Store) Close() error { return nil }

func (s *Store) Ping(ctx context.Context) error {
	_, err := s.db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(s.table)})
	return err
}

// quote makes a table or index name a PartiQL identifier.
func (s *Store) from(index string) string {
	if index == "" {
		return `"` + s.table + `"`
	}
	return `"` + s.table + `"."` + index + `"`
}

// query runs a PartiQL SELECT through every page, or until limit items
// (limit 0: all).
func (s *Store) query(ctx context.Context, stmt string, limit int, params ...types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	var next *string
	for {
		resp, err := s.db.ExecuteStatement(ctx, &dynamodb.ExecuteStatementInput{
			Statement: aws.String(stmt), Parameters: params, NextToken: next, ConsistentRead: aws.Bool(!strings.Contains(stmt, `"."`)),
		})
		if err != nil {
			return nil, err
		}
		out = append(out, resp.Items...)
		if resp.NextToken == nil || (limit > 0 && len(out) >= limit) {
			return out, nil
		}
		next = resp.NextToken
	}
}

// Transaction outcomes the store tells apart.
var (
	errCondition = errors.New("condition failed")
	errDupItem   = errors.New("item exists")
)

// txn runs statements as one ExecuteTransaction. A conflict with another
// transaction is retried with jittered backoff (throttling and 5xx errors
// are retried by the SDK); a failed condition or an existing item comes
// back as errCondition or errDupItem, with the index of the statement.
func (s *Store) txn(ctx context.Context, stmts []types.ParameterizedStatement) (int, error) {
	backoff := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		_, err := s.db.ExecuteTransaction(ctx, &dynamodb.ExecuteTransactionInput{TransactStatements: stmts})
		var tce *types.TransactionCanceledException
		if !errors.As(err, &tce) {
			return -1, err
		}
		conflict := false
		for i, r := range tce.CancellationReasons {
			switch code := aws.ToString(r.Code); {
			case code == "ConditionalCheckFailed":
				return i, errCondition
			case code == "DuplicateItem",
				// DynamoDB Local says so for an INSERT of an existing item.
				code == "ValidationError" && strings.Contains(aws.ToString(r.Message), "Duplicate primary key"):
				return i, errDupItem
			case code == "TransactionConflict":
				conflict = true
			}
		}
		if !conflict || attempt == 8 {
			return -1, err
		}
		time.Sleep(backoff/2 + rand.N(backoff))
		backoff *= 2
	}
}

func stmt(text string, params ...types.AttributeValue) types.ParameterizedStatement {
	return types.ParameterizedStatement{Statement: aws.String(text), Parameters: params}
}

// insert makes an INSERT of an item.
func (s *Store) insert(item map[string]types.AttributeValue) types.ParameterizedStatement {
	keys := make([]string, 0, len(item))
	for k := range item {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	params := make([]types.AttributeValue, 0, len(keys))
	b.WriteString("INSERT INTO " + s.from("") + " VALUE {")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "'%s': ?", k)
		params = append(params, item[k])
	}
	b.WriteString("}")
	return stmt(b.String(), params...)
}

func (s *Store) ttlFor(at time.Time) *int64 {
	if s.ttl <= 0 {
		return nil
	}
	v := at.Add(s.ttl).Unix()
	return &v
}

func (s *Store) getMeta(ctx context.Context, id string) (*meta, error) {
	items, err := s.query(ctx, "SELECT * FROM "+s.from("")+` WHERE "Id" = ? AND "Status" = ?`, 1, str(id), str(metaStatus))
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("message %s: %w", id, backends.ErrNotFound)
	}
	return metaFromItem(items[0])
}

func (s *Store) Get(ctx context.Context, id string) (*backends.Message, error) {
	m, err := s.getMeta(ctx, id)
	if err != nil {
		return nil, err
	}
	return &m.msg, nil
}

// metaUpdate writes a _META item's new state, conditionally on the state
// it was read in: its status, and its revision, so that two writers never
// both succeed.
func (s *Store) metaUpdate(m *meta, readStatus backends.Status, readSeq int64, hadSeq bool, ttl *int64) types.ParameterizedStatement {
	params := []types.AttributeValue{
		&types.AttributeValueMemberM{Value: m.attributes()}, str(string(m.msg.Status)), str(queueKey(&m.msg)),
	}
	text := "UPDATE " + s.from("") + ` SET "Attributes" = ? SET "Queue" = ? SET "QueueKey" = ?`
	if ttl != nil {
		text += ` SET "TTL" = ?`
		params = append(params, num(*ttl))
	}
	text += ` WHERE "Id" = ? AND "Status" = ? AND "Attributes"."Latest" = ?`
	params = append(params, str(m.msg.ID), str(metaStatus), str(string(readStatus)))
	if hadSeq {
		text += ` AND "Attributes"."Seq" = ?`
		params = append(params, num(readSeq))
	} else {
		text += ` AND "Attributes"."Seq" IS MISSING`
	}
	return stmt(text, params...)
}

// statusItem is the item of one history row.
func (s *Store) statusItem(id string, st backends.Status, count, seq int64, reason string, at time.Time, details []byte, ttl *int64) map[string]types.AttributeValue {
	a := map[string]types.AttributeValue{"UpdatedAt": tm(at), "Seq": num(seq)}
	if reason != "" {
		a["Reason"] = str(reason)
	}
	if len(details) > 0 {
		a["Details"] = str(string(details))
	}
	item := map[string]types.AttributeValue{"Id": str(id), "Status": str(statusSortKey(st, count)), "Attributes": &types.AttributeValueMemberM{Value: a}}
	if ttl != nil {
		item["TTL"] = num(*ttl)
	}
	return item
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
type change struct {
	stmts []types.ParameterizedStatement
	m     *meta
}

// prepare applies t to m (read in t.From) and makes the statements.
func (s *Store) prepare(m *meta, t backends.Transition) (*change, error) {
	readStatus, readSeq, hadSeq := m.msg.Status, m.seq, m.hasSeq
	msg := &m.msg
	t.Apply(msg, t.Final())
	ttl := s.ttlFor(t.At)
	if ttl != nil {
		msg.TTL = ttl
	}
	var items []map[string]types.AttributeValue
	steps := append([]backends.Step{{To: t.To, Reason: t.Reason}}, t.Then...)
	for i, st := range steps {
		m.seq++
		m.reached[string(st.To)]++
		var details []byte
		if i == 0 {
			details = t.Details
		}
		items = append(items, s.statusItem(msg.ID, st.To, m.reached[string(st.To)], m.seq, st.Reason, t.At, details, ttl))
	}
	var events []types.ParameterizedStatement
	if t.Event != nil {
		e := *t.Event
		var err error
		if events, err = s.eventInserts(m, &e, t.At, ttl); err != nil {
			return nil, err
		}
		*t.Event = e
	}
	c := &change{m: m, stmts: []types.ParameterizedStatement{s.metaUpdate(m, readStatus, readSeq, hadSeq, ttl)}}
	for _, it := range items {
		c.stmts = append(c.stmts, s.insert(it))
	}
	c.stmts = append(c.stmts, events...)
	return c, nil
}

// transition reads, prepares and commits t, again when another writer
// changed the message but left it in t.From.
func (s *Store) transition(ctx context.Context, t backends.Transition) (*backends.Message, error) {
	for attempt := 1; ; attempt++ {
		m, err := s.getMeta(ctx, t.ID)
		if err != nil {
			return nil, err
		}
		if m.msg.Status != t.From {
			return nil, backends.ErrLockNotAcquired
		}
		c, err := s.prepare(m, t)
		if err != nil {
			return nil, err
		}
		_, err = s.txn(ctx, c.stmts)
		if errors.Is(err, errCondition) && attempt < 10 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return &c.m.msg, nil
	}
}

func (s *Store) Transition(ctx context.Context, t backends.Transition) error {
	if err := t.Check(); err != nil {
		return fmt.Errorf("message %s: %w", t.ID, err)
	}
	if t.At.IsZero() {
		t.At = time.Now().UTC()
	}
	if _, err := s.transition(ctx, t); err != nil {
		return fmt.Errorf("message %s %s to %s: %w", t.ID, t.From, t.To, err)
	}
	return nil
}

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
	if q.Limit <= 0 {
		q.Limit = 100
	}
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
const lowKey = "!"

// queued reads the QueueIndex entries of a status between two keys, in
// order, up to limit (0: all).
func (s *Store) queued(ctx context.Context, queue, from, to string, limit int) ([]map[string]types.AttributeValue, error) {
	return s.query(ctx, "SELECT * FROM "+s.from("QueueIndex")+` WHERE "Queue" = ? AND "QueueKey" BETWEEN ? AND ?`, limit,
		str(queue), str(from), str(to))
}

func (s *Store) Claim(ctx context.Context, c backends.Claim) ([]*backends.Message, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Limit <= 0 {
		return nil, nil
	}
	var skip []string
	if c.From == backends.StatusReady {
		var err error
		if skip, err = s.SuspendedBatches(ctx); err != nil {
			return nil, err
		}
	}
	var out []*backends.Message
	ranges := [][2]string{{lowKey, keyTime(c.Now) + "~"}}
	if c.From == backends.StatusReady || c.From == backends.StatusAccepted {
		ranges = nil
		for p := backends.PriorityImmediate; p <= backends.PriorityLow; p++ {
			ranges = append(ranges, [2]string{fmt.Sprintf("%d#", p), fmt.Sprintf("%d#%s~", p, keyTime(c.Now))})
		}
	}
	for _, r := range ranges {
		if len(out) == c.Limit {
			break
		}
		// More candidates than wanted: claimers racing for the first ones
		// move on to the next.
		items, err := s.queued(ctx, string(c.From), r[0], r[1], 4*c.Limit+16+len(skip))
		if err != nil {
			return nil, fmt.Errorf("claim %s: %w", c.From, err)
		}
		for _, it := range items {
			if len(out) == c.Limit {
				break
			}
			if b := getS(getM(it, "Attributes"), "Batch"); b != "" && slices.Contains(skip, b) {
				continue
			}
			m, err := s.transition(ctx, backends.Transition{ID: getS(it, "Id"), From: c.From, To: c.To, At: c.Now,
				Reason: c.Reason, KeepReason: true, LeaseUntil: c.LeaseUntil})
			if errors.Is(err, backends.ErrLockNotAcquired) || errors.Is(err, backends.ErrNotFound) {
				continue // another relay was faster
			}
			if err != nil {
				return out, fmt.Errorf("claim %s: %w", c.From, err)
			}
			out = append(out, m)
		}
	}
	return out, nil
}

func (s *Store) Restore(ctx context.Context, expiredBefore time.Time) (int, error) {
	total := 0
	now := time.Now().UTC()
	for _, st := range backends.Statuses() {
		if !st.Working() {
			continue
		}
		items, err := s.queued(ctx, string(st), lowKey, keyTime(expiredBefore), 0)
		if err != nil {
			return total, fmt.Errorf("restore: %w", err)
		}
		for _, it := range items {
			m, err := metaFromItem(it)
			if err != nil {
				return total, err
			}
			if !m.msg.LeaseUntil.Before(expiredBefore) {
				continue
			}
			prev := st.Previous()
			_, err = s.transition(ctx, backends.Transition{ID: m.msg.ID, From: st, To: prev, At: now, KeepReason: true,
				Reason: fmt.Sprintf("lease of %s expired at %s; returned to %s", st, m.msg.LeaseUntil.UTC().Format(time.RFC3339), prev)})
			if errors.Is(err, backends.ErrLockNotAcquired) {
				continue
			}
			if err != nil {
				return total, fmt.Errorf("restore: %w", err)
			}
			total++
		}
	}
	n, err := s.restoreEvents(ctx, expiredBefore, now)
	return total + n, err
}

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

func (s *Store) Purge(ctx context.Context, cutoff time.Time, limit int) ([]*backends.Message, error) {
	var out []*backends.Message
	for _, st := range backends.Statuses() {
		if !st.Acknowledged() || len(out) >= limit {
			continue
		}
		items, err := s.queued(ctx, string(st), lowKey, keyTime(cutoff), limit-len(out))
		if err != nil {
			return out, fmt.Errorf("purge: %w", err)
		}
		for _, it := range items {
			if len(out) >= limit {
				break
			}
			m, err := metaFromItem(it)
			if err != nil {
				return out, err
			}
			if !m.msg.UpdatedAt.Before(cutoff) {
				continue
			}
			ok, err := s.remove(ctx, m, st)
			if err != nil {
				return out, fmt.Errorf("purge: %w", err)
			}
			if ok {
				out = append(out, &m.msg)
			}
		}
	}
	return out, nil
}

// remove deletes a message's items: the _META item first, on condition that
// it is still in status st, then the others (history, events), which are
// of no use without it.
func (s *Store) remove(ctx context.Context, m *meta, st backends.Status) (bool, error) {
	_, err := s.txn(ctx, []types.ParameterizedStatement{stmt("DELETE FROM "+s.from("")+
		` WHERE "Id" = ? AND "Status" = ? AND "Attributes"."Latest" = ?`, str(m.msg.ID), str(metaStatus), str(string(st)))})
	if errors.Is(err, errCondition) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	items, err := s.query(ctx, "SELECT * FROM "+s.from("")+` WHERE "Id" = ?`, 0, str(m.msg.ID))
	if err != nil {
		return true, err
	}
	for _, it := range items {
		sk := getS(it, "Status")
		dels := []types.ParameterizedStatement{stmt("DELETE FROM "+s.from("")+` WHERE "Id" = ? AND "Status" = ?`, str(m.msg.ID), str(sk))}
		if strings.HasPrefix(sk, eventPrefix) {
			ref := eventRef(getS(getM(it, "Attributes"), "EventId"))
			dels = append(dels, stmt("DELETE FROM "+s.from("")+` WHERE "Id" = ? AND "Status" = ?`, str(ref), str(eventRefStatus)))
		}
		if _, err := s.txn(ctx, dels); err != nil {
			return true, err
		}
	}
	return true, nil
}
