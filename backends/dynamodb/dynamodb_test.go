package dynamodb_test

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
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
