// Package dynamodb is the outbox in a DynamoDB table, in the seed's single
// table layout (see items.go), written with PartiQL: every transition is one
// ExecuteTransaction of the _META update, conditional on the expected
// status and revision, the insert of the new status item and the counters
// (counts.go); a claim does that for up to 45 messages at once.
package dynamodb

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

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
	// SeedIndex makes CreateTable add the seed's StatusIndex, for tools
	// that know only the seed; the relay does not need it (see seedIndex).
	SeedIndex bool
	// HTTPClient, when set, carries the requests (a test counts them).
	HTTPClient aws.HTTPClient
}

// Store is an outbox in DynamoDB.
type Store struct {
	db     *dynamodb.Client
	table  string
	ttl    time.Duration
	recent recent
	// backlog is, for ACCEPTED ([0]) and READY ([1]) and each shard,
	// whether the last claim found more due there than it read: the next
	// reads the shard in claim order at once (see claimable).
	backlog [2][shards]atomic.Bool
	// minute is the last minute, in Unix time, whose activity items this
	// store made sure of (ensureMinute, under minuteMu).
	minute   atomic.Int64
	minuteMu sync.Mutex
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
		o.HTTPClient = httpClient()
		if opts.HTTPClient != nil {
			o.HTTPClient = opts.HTTPClient
		}
		if opts.Endpoint != "" || os.Getenv("AWS_ENDPOINT_URL") != "" {
			// DynamoDB Local sometimes sends a CRC32 header that does not
			// match its own body.
			o.DisableValidateResponseChecksum = true
		}
	})
	return client, table, nil
}

// idleConns is how many connections to DynamoDB stay open between
// requests. A claim sends a request per shard and priority at once (33 when
// nothing is due), and the SDK keeps 10 a host: it closed the others after
// every claim and opened them again at the next, a TLS handshake each on
// AWS.
const idleConns = 128

// httpClient is the SDK's client, its defaults kept, with idleConns.
func httpClient() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.MaxIdleConns, t.MaxIdleConnsPerHost = idleConns, idleConns
	})
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
	s := &Store{db: client, table: table, ttl: opts.TTL}
	if err := s.ensureCounters(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) Close() error { return nil }

// Ping reads the layout item: a read of the table's data, as cheap as any,
// where DescribeTable is rate-limited on AWS and slow on DynamoDB Local.
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: layoutKey()})
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
// (limit 0: all), each request asking for no more than are still wanted.
func (s *Store) query(ctx context.Context, stmt string, limit int, params ...types.AttributeValue) ([]map[string]types.AttributeValue, error) {
	var (
		out  []map[string]types.AttributeValue
		next *string
	)
	for {
		in := &dynamodb.ExecuteStatementInput{Statement: aws.String(stmt), Parameters: params, NextToken: next,
			ConsistentRead: aws.Bool(!strings.Contains(stmt, `"."`))}
		if limit > 0 {
			in.Limit = aws.Int32(int32(limit - len(out)))
		}
		resp, err := s.db.ExecuteStatement(ctx, in)
		if err != nil {
			return out, err
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
	refused, err := s.txnRefused(ctx, stmts)
	if len(refused) > 0 {
		return refused[0].index, refused[0].err
	}
	return -1, err
}

// outcomeUnknown says of a transaction's error whether it may have
// landed (backends.ErrOutcomeUnknown): DynamoDB did not answer (the
// connection was lost, the context ended first), or failed on its side.
// An error it answered for the request itself means it did not.
func outcomeUnknown(err error) error {
	var answered smithy.APIError
	if err == nil || errors.As(err, &answered) && answered.ErrorFault() != smithy.FaultServer {
		return err
	}
	return fmt.Errorf("%w: %w", backends.ErrOutcomeUnknown, err)
}

// refusal is a statement of a cancelled transaction that was refused:
// errCondition or errDupItem.
type refusal struct {
	index int
	err   error
}

// txnRefused runs statements as one ExecuteTransaction, as txn does, and
// when the transaction is cancelled says every statement that was refused,
// so that a batch can go again without them.
func (s *Store) txnRefused(ctx context.Context, stmts []types.ParameterizedStatement) ([]refusal, error) {
	return refusals(func() error {
		_, err := s.db.ExecuteTransaction(ctx, &dynamodb.ExecuteTransactionInput{TransactStatements: stmts})
		return err
	})
}

// writeTxn runs items as one TransactWriteItems, as txn runs statements:
// for what PartiQL cannot say, an update that makes its item (ADD).
func (s *Store) writeTxn(ctx context.Context, items []types.TransactWriteItem) (int, error) {
	refused, err := refusals(func() error {
		_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		return err
	})
	if len(refused) > 0 {
		return refused[0].index, refused[0].err
	}
	return -1, err
}

// refusals runs a transaction, again on a conflict with another, and
// when it is cancelled says every part that was refused.
func refusals(run func() error) ([]refusal, error) {
	backoff := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := run()
		var tce *types.TransactionCanceledException
		if !errors.As(err, &tce) {
			return nil, outcomeUnknown(err)
		}
		var refused []refusal
		conflict := false
		for i, r := range tce.CancellationReasons {
			switch code := aws.ToString(r.Code); {
			case code == "ConditionalCheckFailed":
				refused = append(refused, refusal{i, errCondition})
			case duplicateItem(code, aws.ToString(r.Message)):
				refused = append(refused, refusal{i, errDupItem})
			case code == "TransactionConflict":
				conflict = true
			}
		}
		if len(refused) > 0 {
			return refused, refused[0].err
		}
		if !conflict || attempt == 8 {
			return nil, err
		}
		time.Sleep(backoff/2 + rand.N(backoff))
		backoff *= 2
	}
}

// duplicateItem reports whether DynamoDB refused an INSERT for an item
// that is there already.
func duplicateItem(code, msg string) bool {
	// DynamoDB Local says so with a ValidationError.
	return code == "DuplicateItem" || code == "ValidationError" && strings.Contains(msg, "Duplicate primary key")
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

// metaChange runs a change of a message's items that its _META item
// records (an alarm, a receipt) with that item, again when the message
// changed meanwhile. change sees the message as read and returns the
// statements of the change, none when there is nothing to do.
func (s *Store) metaChange(ctx context.Context, id string, change func(m *meta) ([]types.ParameterizedStatement, error)) error {
	for attempt := 1; ; attempt++ {
		m, err := s.getMeta(ctx, id)
		if err != nil {
			return err
		}
		readSeq, hadSeq := m.seq, m.hasSeq
		stmts, err := change(m)
		if stmts == nil || err != nil {
			return err
		}
		m.seq++
		stmts = append([]types.ParameterizedStatement{s.metaUpdate(m, m.msg.Status, readSeq, hadSeq, nil)}, stmts...)
		_, err = s.txn(ctx, stmts)
		if errors.Is(err, errCondition) && attempt < 10 {
			continue
		}
		return err
	}
}

// indexKeys are the top-level attributes of a _META item that place it in
// the indexes; DueKey is there only in a status claims take from, BatchKey
// only for a message of a batch (batchParts).
func indexKeys(m *meta) map[string]types.AttributeValue {
	k := map[string]types.AttributeValue{
		"Queue": str(queueOf(m)), "QueueKey": str(queueKey(&m.msg)), "MetaShard": str(sharded(metaStatus, shardOf(m.msg.ID))),
	}
	if prioritized(m.msg.Status) {
		k["DueKey"] = str(dueKey(&m.msg))
	}
	if m.msg.Batch != "" {
		k["BatchKey"] = str(batchPart(m.msg.Batch, m.msg.Status.Undelivered()))
	}
	return k
}

// optionalKeys are the index keys a _META item has only at times: an
// update that does not set one removes it.
func optionalKeys() []string { return []string{"DueKey", "BatchKey"} }

// metaUpdate writes a _META item's new state, conditionally on the state
// it was read in: its status, and its revision, so that two writers never
// both succeed.
func (s *Store) metaUpdate(m *meta, readStatus backends.Status, readSeq int64, hadSeq bool, ttl *int64) types.ParameterizedStatement {
	keys := indexKeys(m)
	params := []types.AttributeValue{&types.AttributeValueMemberM{Value: m.attributes()}, keys["Queue"], keys["QueueKey"], keys["MetaShard"]}
	text := "UPDATE " + s.from("") + ` SET "Attributes" = ? SET "Queue" = ? SET "QueueKey" = ? SET "MetaShard" = ?`
	for _, name := range optionalKeys() {
		if v, ok := keys[name]; ok {
			text += ` SET "` + name + `" = ?`
			params = append(params, v)
		}
	}
	if ttl != nil {
		text += ` SET "TTL" = ?`
		params = append(params, num(*ttl))
	}
	for _, name := range optionalKeys() {
		if _, ok := keys[name]; !ok {
			text += ` REMOVE "` + name + `"`
		}
	}
	where, wparams := s.metaAsRead(m.msg.ID, readStatus, readSeq, hadSeq)
	return stmt(text+where, append(params, wparams...)...)
}

// metaAsRead is the WHERE clause that holds a _META item to the state it
// was read in: its status and its revision.
func (s *Store) metaAsRead(id string, readStatus backends.Status, readSeq int64, hadSeq bool) (string, []types.AttributeValue) {
	text := ` WHERE "Id" = ? AND "Status" = ? AND "Attributes"."Latest" = ?`
	params := []types.AttributeValue{str(id), str(metaStatus), str(string(readStatus))}
	if hadSeq {
		return text + ` AND "Attributes"."Seq" = ?`, append(params, num(readSeq))
	}
	return text + ` AND "Attributes"."Seq" IS MISSING`, params
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
