package dynamodb_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/dynamodb"
)

// The store's chunk and the bytes a create's transaction carries.
const (
	chunk   = 350_000
	txBytes = 3 << 20
)

// itemKeys lists the sort keys of the items of partition id, every page.
func itemKeys(t *testing.T, opts dynamodb.Options, id string) []string {
	t.Helper()
	client, table, err := dynamodb.Client(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	in := &awsdynamodb.QueryInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("Id = :id"),
		ProjectionExpression:      aws.String("#s"),
		ExpressionAttributeNames:  map[string]string{"#s": "Status"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":id": &types.AttributeValueMemberS{Value: id}}}
	var out []string
	for {
		resp, err := client.Query(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range resp.Items {
			out = append(out, sOf(it["Status"]))
		}
		if resp.LastEvaluatedKey == nil {
			return out
		}
		in.ExclusiveStartKey = resp.LastEvaluatedKey
	}
}

func countPrefix(keys []string, prefix string) int {
	n := 0
	for _, k := range keys {
		if strings.HasPrefix(k, prefix) {
			n++
		}
	}
	return n
}

// TestBodies keeps message bytes in the table: read back whole around the
// chunk's size and past what a create's transaction carries, out of the
// way of History and of the seed's StatusIndex query, and deleted by Purge
// with the message's other items.
func TestBodies(t *testing.T) {
	ctx := context.Background()
	opts := createFresh(t, dynamodb.Options{SeedIndex: true})
	s := openStore(t, opts)
	sizes := []int{0, 1, chunk - 1, chunk, chunk + 1, txBytes, txBytes + 1, 2*txBytes + 17}
	want := map[string][]byte{}
	for i, n := range sizes {
		id := fmt.Sprintf("body-%d", i)
		want[id] = backendtest.RandomBytes(n)
		if err := s.Create(ctx, backendtest.BodyMessage(id, "0123456789ab", want[id])); err != nil {
			t.Fatalf("create %d bytes: %v", n, err)
		}
	}
	for i, n := range sizes {
		id := fmt.Sprintf("body-%d", i)
		if got := backendtest.ReadBody(t, s, id); !bytes.Equal(got, want[id]) {
			t.Errorf("%s: read %d bytes back, want %d", id, len(got), n)
		}
		keys := itemKeys(t, opts, id)
		if c := countPrefix(keys, "_SPOOL#"); c != max(1, (n+chunk-1)/chunk) {
			t.Errorf("%s: %d chunks for %d bytes", id, c, n)
		}
		if c := countPrefix(keys, "_SPOOLING#"); c != 0 {
			t.Errorf("%s: %d pending items left after its create", id, c)
		}
		h, err := s.History(ctx, id)
		if err != nil || len(h) != 1 || h[0].Status != backends.StatusAccepted {
			t.Errorf("%s: history %+v, %v", id, h, err)
		}
	}
	if _, err := s.OpenBody(ctx, "nobody"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("OpenBody of no message: %v", err)
	}

	// The seed's query finds the messages, and nothing else; a chunk's
	// entry in StatusIndex holds no bytes.
	client, table, err := dynamodb.Client(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Query(ctx, &awsdynamodb.QueryInput{TableName: aws.String(table), IndexName: aws.String("StatusIndex"),
		KeyConditionExpression: aws.String("#s = :m"), FilterExpression: aws.String("#a.Latest = :st"),
		ExpressionAttributeNames: map[string]string{"#s": "Status", "#a": "Attributes"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":m": &types.AttributeValueMemberS{Value: "_META"},
			":st": &types.AttributeValueMemberS{Value: "ACCEPTED"}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Items) != len(sizes) {
		t.Errorf("the seed's StatusIndex query found %d items, want %d", len(resp.Items), len(sizes))
	}
	resp, err = client.Query(ctx, &awsdynamodb.QueryInput{TableName: aws.String(table), IndexName: aws.String("StatusIndex"),
		KeyConditionExpression:    aws.String("#s = :k"),
		ExpressionAttributeNames:  map[string]string{"#s": "Status"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":k": &types.AttributeValueMemberS{Value: "_SPOOL#0123456789ab#0001"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range resp.Items {
		if _, ok := it["Data"]; ok {
			t.Error("StatusIndex holds a chunk's bytes")
		}
	}

	// Purge deletes the bytes with the row.
	for i := range sizes {
		acknowledge(t, s, fmt.Sprintf("body-%d", i))
	}
	purged, err := s.Purge(ctx, time.Now().Add(time.Second), 100)
	if err != nil || len(purged) != len(sizes) {
		t.Fatalf("purged %d messages, want %d: %v", len(purged), len(sizes), err)
	}
	for i := range sizes {
		if keys := itemKeys(t, opts, fmt.Sprintf("body-%d", i)); len(keys) != 0 {
			t.Errorf("body-%d: items left after the purge: %v", i, keys)
		}
	}
}

// acknowledge moves a message just created to SENT-ACKNOWLEDGED, which
// Purge removes.
func acknowledge(t *testing.T, s *dynamodb.Store, id string) {
	t.Helper()
	lease := time.Now().Add(time.Minute)
	for _, tr := range []backends.Transition{
		{From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: lease},
		{From: backends.StatusIntaking, To: backends.StatusReady},
		{From: backends.StatusReady, To: backends.StatusProcessing, LeaseUntil: lease},
		{From: backends.StatusProcessing, To: backends.StatusSent, Reason: "250 ok"},
		{From: backends.StatusSent, To: backends.StatusCallingSent, LeaseUntil: lease},
		{From: backends.StatusCallingSent, To: backends.StatusSentAcknowledged},
	} {
		tr.ID = id
		if err := s.Transition(context.Background(), tr); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBodiesWithoutRow: a second submission of an id whose bytes are too
// large for its transaction writes them under its own nonce, then finds
// the row made: the first submission's bytes are still read, and the
// second's are given up once they have waited for an hour.
func TestBodiesWithoutRow(t *testing.T) {
	ctx := context.Background()
	opts := freshTable(t, 0)
	s := openStore(t, opts)
	first, second := backendtest.RandomBytes(txBytes+1), backendtest.RandomBytes(txBytes+2)
	if err := s.Create(ctx, backendtest.BodyMessage("dup", "bbbbbbbbbbbb", first)); err != nil {
		t.Fatal(err)
	}
	if err := s.Create(ctx, backendtest.BodyMessage("dup", "aaaaaaaaaaaa", second)); !errors.Is(err, backends.ErrDuplicate) {
		t.Fatalf("duplicate create: %v", err)
	}
	keys := itemKeys(t, opts, "dup")
	if c := countPrefix(keys, "_SPOOL#aaaaaaaaaaaa#"); c != 9 || !slices.Contains(keys, "_SPOOLING#aaaaaaaaaaaa") {
		t.Fatalf("the second submission left %d chunks, items %v", c, keys)
	}
	if got := backendtest.ReadBody(t, s, "dup"); !bytes.Equal(got, first) {
		t.Error("the second submission's bytes were read for the row")
	}
	if err := s.SweepSpooling(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if c := countPrefix(itemKeys(t, opts, "dup"), "_SPOOL#aaaaaaaaaaaa#"); c != 9 {
		t.Fatalf("bytes swept before they had waited an hour: %d chunks left", c)
	}
	if err := s.SweepSpooling(ctx, time.Now().Add(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	keys = itemKeys(t, opts, "dup")
	if countPrefix(keys, "_SPOOL#aaaaaaaaaaaa#") != 0 || countPrefix(keys, "_SPOOLING#") != 0 {
		t.Errorf("the sweep left %v", keys)
	}
	if countPrefix(keys, "_SPOOL#bbbbbbbbbbbb#") != 9 {
		t.Errorf("the sweep took the row's bytes: %v", keys)
	}
	if got := backendtest.ReadBody(t, s, "dup"); !bytes.Equal(got, first) {
		t.Error("the row's bytes changed")
	}
}

// TestBodyRoundTrips counts the requests a message's bytes cost: none
// beside the create's transaction and one Query to read them while they
// fit in it; past it, a write of 25 chunks at a time before the
// transaction, and a Query a megabyte (DynamoDB's page) at a time, one
// more when the last page ends on the last chunk.
func TestBodyRoundTrips(t *testing.T) {
	ctx := context.Background()
	opts := freshTable(t, 0)
	counter := counted(&opts)
	s := openStore(t, opts)
	for _, tc := range []struct {
		size         int
		create, read int
	}{
		{4 << 10, 1, 1},
		{txBytes, 1, 4},
		{2*txBytes + 17, 2, 7},
	} {
		id := fmt.Sprintf("count-%d", tc.size)
		body := backendtest.RandomBytes(tc.size)
		counter.reset()
		if err := s.Create(ctx, backendtest.BodyMessage(id, "0123456789ab", body)); err != nil {
			t.Fatal(err)
		}
		n, calls := counter.total()
		t.Logf("%d bytes: create %s", tc.size, calls)
		// The first change of a minute makes its activity items first
		// (activity.go): a request a minute, not a message.
		if n -= counter.of("BatchGetItem") + counter.of("UpdateItem"); n > tc.create {
			t.Errorf("%d bytes: create took %d requests (%s), want %d", tc.size, n, calls, tc.create)
		}
		counter.reset()
		if got := backendtest.ReadBody(t, s, id); !bytes.Equal(got, body) {
			t.Fatalf("%d bytes read back wrong", tc.size)
		}
		n, calls = counter.total()
		t.Logf("%d bytes: read %s", tc.size, calls)
		if n > tc.read {
			t.Errorf("%d bytes: read took %d requests (%s), want %d", tc.size, n, calls, tc.read)
		}
	}
}

// TestBodyChunkMissing: bytes missing a chunk (expired by its TTL) are not
// read short, which would send the message cut: OpenBody says what is
// missing.
func TestBodyChunkMissing(t *testing.T) {
	ctx := context.Background()
	opts := freshTable(t, 0)
	s := openStore(t, opts)
	body := backendtest.RandomBytes(2*chunk + 10)
	if err := s.Create(ctx, backendtest.BodyMessage("cut-1", "0123456789ab", body)); err != nil {
		t.Fatal(err)
	}
	client, table, err := dynamodb.Client(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.DeleteItem(ctx, &awsdynamodb.DeleteItemInput{TableName: aws.String(table), Key: map[string]types.AttributeValue{
		"Id": &types.AttributeValueMemberS{Value: "cut-1"}, "Status": &types.AttributeValueMemberS{Value: "_SPOOL#0123456789ab#0003"}}}); err != nil {
		t.Fatal(err)
	}
	if r, err := s.OpenBody(ctx, "cut-1"); err == nil || !strings.Contains(err.Error(), "2 of its 3 chunks") {
		if r != nil {
			r.Close()
		}
		t.Fatalf("OpenBody with a chunk gone: %v, want it said", err)
	}
}
