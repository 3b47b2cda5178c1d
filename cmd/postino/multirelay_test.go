package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/internal/testrig/smtptest"
)

// serviceMissing skips a test whose service is not there, or fails it
// under CI=true.
func serviceMissing(t *testing.T, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is needed: %v", what, err)
	}
	t.Skipf("no %s: %v", what, err)
}

// dynamoDBEnv skips the test (fails it under CI=true) when DynamoDB Local
// at TEST_POSTINO_DYNAMODB_ENDPOINT (default http://127.0.0.1:8000) does not
// answer, sets the AWS environment that reaches it for this process, and
// returns it for the relay processes the test starts.
func dynamoDBEnv(t *testing.T) []string {
	t.Helper()
	endpoint := os.Getenv("TEST_POSTINO_DYNAMODB_ENDPOINT")
	if endpoint == "" {
		endpoint = "http://127.0.0.1:8000"
	}
	if c, err := net.DialTimeout("tcp", strings.TrimPrefix(endpoint, "http://"), time.Second); err != nil {
		serviceMissing(t, "DynamoDB Local", err)
	} else {
		c.Close()
	}
	env := []string{"AWS_ENDPOINT_URL=" + endpoint, "AWS_ACCESS_KEY_ID=postino", "AWS_SECRET_ACCESS_KEY=postino", "AWS_REGION=us-east-1"}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return env
}

// dynamoDBTable creates a new outbox table, named after prefix, on the
// DynamoDB that dynamoDBEnv reaches.
func dynamoDBTable(t *testing.T, prefix string) string {
	t.Helper()
	table := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	var out strings.Builder
	if code := run(context.Background(), []string{"dynamodb", "create-table", "--table", table}, &out, &out); code != 0 {
		t.Fatalf("create-table: %s", out.String())
	}
	return table
}

// runShared starts three relays sharing one outbox and one spool, submits
// total messages across them, and checks that the upstream got each
// exactly once and that every row is acknowledged.
func runShared(t *testing.T, total int, args, env []string) {
	bin := buildBinary(t)
	data := t.TempDir()
	up := smtptest.Start(t, smtptest.Options{})
	var relays []*process
	for i := range 3 {
		a := append([]string{"--smarthost", up.Addr}, args...)
		relays = append(relays, startProcess(t, bin, data, a, append([]string{fmt.Sprintf("POSTINO_HOSTNAME=relay-%d", i+1)}, env...)))
	}

	var wg sync.WaitGroup
	ids := make(chan string)
	for w := range 12 {
		wg.Go(func() {
			addr := relays[w%3].smtp
			var c *smtp.Client
			defer func() {
				if c != nil {
					c.Quit()
				}
			}()
			for id := range ids {
				var err error
				if c == nil {
					if c, err = smtp.Dial(addr); err != nil {
						t.Error(err)
						continue
					}
				}
				err = c.SendMail("app@example.com", []string{"user@example.net"},
					strings.NewReader("From: app@example.com\r\nX-Genro-Mail-ID: "+id+"\r\nSubject: shared\r\n\r\nbody\r\n"))
				if err != nil {
					t.Errorf("%s: %v", id, err)
					c.Close()
					c = nil
				}
			}
		})
	}
	for i := range total {
		ids <- fmt.Sprintf("shared-%05d", i)
	}
	close(ids)
	wg.Wait()

	// The relays have as long as they make progress, however loaded the
	// machine: only a stretch without a new acknowledgement means a message
	// is stuck (their leases are far longer than the test).
	const stall = 2 * time.Minute
	deadline := time.Now().Add(stall)
	for last := 0; ; {
		acked := 0
		for _, p := range relays {
			if n := metric(t, p.admin, `postino_queue_messages{status="SENT-ACKNOWLEDGED"}`); n > acked {
				acked = n
			}
		}
		if acked == total {
			break
		}
		if acked > last {
			last, deadline = acked, time.Now().Add(stall)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages acknowledged, none more for %s; upstream got %d", acked, total, stall, len(up.Messages()))
		}
		time.Sleep(200 * time.Millisecond)
	}
	times := map[string]int{}
	for _, m := range up.Messages() {
		times[m.Header("X-Genro-Mail-ID")]++
	}
	for i := range total {
		if n := times[fmt.Sprintf("shared-%05d", i)]; n != 1 {
			t.Errorf("shared-%05d delivered %d times", i, n)
		}
	}
	if len(times) != total {
		t.Errorf("upstream got %d distinct messages, want %d", len(times), total)
	}
	// Each relay delivered a part: they really shared the work.
	for i, p := range relays {
		t.Logf("relay-%d delivered %d", i+1, metric(t, p.admin, `postino_delivery_delivered_total{route="default"}`))
	}
}

// metric reads one value from a relay's /metrics.
func metric(t *testing.T, admin, series string) int {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var n float64
			fmt.Sscan(v, &n)
			return int(n)
		}
	}
	return 0
}

func TestSharedMySQL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three relays")
	}
	ctx := context.Background()
	dsn := emptyDatabase(t)
	// The schema first: serve refuses one that is behind.
	var out strings.Builder
	if code := run(ctx, []string{"serve", "--backend", "mysql", "--dsn", dsn, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data", t.TempDir()}, io.Discard, &out); code == 0 ||
		!strings.Contains(out.String(), "postino migrate --backend mysql") {
		t.Fatalf("serve on an empty database: exit %d, %s", code, out.String())
	}
	for range 2 {
		out.Reset()
		if code := run(ctx, []string{"migrate", "--backend", "mysql", "--dsn", dsn}, &out, &out); code != 0 {
			t.Fatalf("migrate: %s", out.String())
		}
	}
	if !strings.Contains(out.String(), "nothing to do") {
		t.Errorf("a second migrate said %q", out.String())
	}
	runShared(t, 3000, []string{"--backend", "mysql", "--dsn", dsn}, nil)
}

func TestSharedDynamoDB(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three relays")
	}
	env := dynamoDBEnv(t)
	table := dynamoDBTable(t, "shared")
	// Fewer messages than on MySQL, each DynamoDB Local request being
	// slower: a thousand still keeps the three relays claiming from the same
	// queue at once all along.
	runShared(t, 1000, []string{"--backend", "dynamodb", "--table", table}, env)
}
