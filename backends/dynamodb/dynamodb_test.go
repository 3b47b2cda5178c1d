package dynamodb_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/dynamodb"
)

// endpoint is the DynamoDB Local the tests use (make test starts one).
func endpoint() string {
	if e := os.Getenv("TEST_POSTINO_DYNAMODB_ENDPOINT"); e != "" {
		return e
	}
	return "http://127.0.0.1:8000"
}

func TestMain(m *testing.M) {
	// DynamoDB Local takes any credentials, but the SDK wants some.
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "postino", "AWS_SECRET_ACCESS_KEY": "postino", "AWS_REGION": "us-east-1"} {
		if os.Getenv(k) == "" {
			os.Setenv(k, v)
		}
	}
	os.Exit(m.Run())
}

var tables atomic.Int64

// freshTable creates an empty table for one test. Without DynamoDB Local
// the test is skipped, or fails under CI=true.
func freshTable(t testing.TB, ttl time.Duration) dynamodb.Options {
	t.Helper()
	return createFresh(t, dynamodb.Options{TTL: ttl})
}

// createFresh creates an empty table with opts for one test.
func createFresh(t testing.TB, opts dynamodb.Options) dynamodb.Options {
	t.Helper()
	u, _ := url.Parse(endpoint())
	if c, err := net.DialTimeout("tcp", u.Host, time.Second); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("DynamoDB Local is needed at %s (TEST_POSTINO_DYNAMODB_ENDPOINT): %v", endpoint(), err)
		}
		t.Skipf("no DynamoDB Local at %s: %v", endpoint(), err)
	} else {
		c.Close()
	}
	opts.Table, opts.Endpoint = fmt.Sprintf("outbox_%d_%d", os.Getpid(), tables.Add(1)), endpoint()
	if _, _, err := dynamodb.CreateTable(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		client, table, err := dynamodb.Client(context.Background(), opts)
		if err == nil {
			client.DeleteTable(context.Background(), &awsdynamodb.DeleteTableInput{TableName: aws.String(table)})
		}
	})
	return opts
}

func open(t *testing.T) backends.Outbox {
	return openStore(t, freshTable(t, 0))
}

// openStore opens a store on the table of opts.
func openStore(t testing.TB, opts dynamodb.Options) *dynamodb.Store {
	t.Helper()
	s, err := dynamodb.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	backendtest.Run(t, open)
}

func BenchmarkStore(b *testing.B) {
	backendtest.Benchmark(b, func(b *testing.B) backends.Outbox {
		return openStore(b, freshTable(b, 0))
	})
}

// lostReplies is a store's HTTP transport that, while lose is set, sends
// every transaction to DynamoDB and loses its reply, as a connection cut
// after the request went out would.
type lostReplies struct{ lose atomic.Bool }

func (l *lostReplies) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || !l.lose.Load() || !strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".ExecuteTransaction") {
		return resp, err
	}
	resp.Body.Close()
	return nil, errors.New("the reply is lost (test)")
}

// TestCreateReplyLost: a create whose transaction landed but whose every
// reply was lost, until its time ran out (the SDK's retries included),
// says it may have landed, and it did; one DynamoDB refused does not.
func TestCreateReplyLost(t *testing.T) {
	ctx := context.Background()
	opts := freshTable(t, 0)
	lost := &lostReplies{}
	opts.HTTPClient = &http.Client{Transport: lost}
	s := openStore(t, opts)
	m := func() *backends.Message {
		return &backends.Message{ID: "lost-1", EmlPath: "lost-1.eml", Envelope: backends.Envelope{Sender: "a@example.com", Recipients: []string{"b@example.net"}}}
	}
	lost.lose.Store(true)
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	err := s.Create(short, m())
	cancel()
	lost.lose.Store(false)
	if !errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Fatalf("create with its replies lost: %v, want backends.ErrOutcomeUnknown", err)
	}
	if _, err := s.Get(ctx, "lost-1"); err != nil {
		t.Errorf("the create landed, yet: %v", err)
	}
	if err := s.Create(ctx, m()); !errors.Is(err, backends.ErrDuplicate) || errors.Is(err, backends.ErrOutcomeUnknown) {
		t.Errorf("a create DynamoDB refused: %v, want backends.ErrDuplicate alone", err)
	}
}
