package dynamodb_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/dynamodb"
)

// callCounter counts the requests a store sends to DynamoDB, by
// operation, retries included, and the entries its queries read: it is
// the store's HTTP transport.
type callCounter struct {
	next    http.RoundTripper
	mu      sync.Mutex
	calls   map[string]int
	queried int
}

func (c *callCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	op := r.Header.Get("X-Amz-Target")
	op = op[strings.LastIndex(op, ".")+1:]
	c.mu.Lock()
	c.calls[op]++
	c.mu.Unlock()
	resp, err := c.next.RoundTrip(r)
	if err != nil || op != "Query" || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	var read struct{ Count int }
	if err := json.Unmarshal(body, &read); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.queried += read.Count
	c.mu.Unlock()
	return resp, nil
}

// counted gives opts a transport that counts its requests.
func counted(opts *dynamodb.Options) *callCounter {
	c := &callCounter{next: dynamodb.Transport(), calls: map[string]int{}}
	opts.HTTPClient = &http.Client{Transport: c}
	return c
}

func (c *callCounter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls, c.queried = map[string]int{}, 0
}

// entries is how many entries the queries read.
func (c *callCounter) entries() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queried
}

// of is how many requests of op were sent.
func (c *callCounter) of(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[op]
}

func (c *callCounter) total() (int, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var n int
	var parts []string
	for op, k := range c.calls {
		n += k
		parts = append(parts, fmt.Sprintf("%s=%d", op, k))
	}
	sort.Strings(parts)
	return n, strings.Join(parts, " ")
}

// maxCallsPerMessage is what the message's way through the store may cost
// in requests to DynamoDB: creating it, its two claims and three
// transitions. With 8 callers each claiming 10 at a time, one read and
// one transaction per claimed message cost 31.66 to 31.93; claims in
// batches, and transitions that need not read what the store just wrote,
// 6.53 to 7.23.
const maxCallsPerMessage = 10.0

// TestRoundTripsPerMessage counts the requests that take messages from
// Create through intake and delivery to SENT-ACKNOWLEDGED, with the relay's
// callers working at once: sessions creating, claimers of ACCEPTED and
// READY, and their workers moving what they claimed.
func TestRoundTripsPerMessage(t *testing.T) {
	const (
		messages = 200
		callers  = 8
		limit    = 10
	)
	ctx := context.Background()
	opts := freshTable(t, 0)
	counter := counted(&opts)
	s, err := dynamodb.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	counter.reset()

	var next atomic.Int64
	parallel(t, callers, func() error {
		for {
			i := next.Add(1)
			if i > messages {
				return nil
			}
			if err := s.Create(ctx, &backends.Message{ID: fmt.Sprintf("rt-%04d", i), Priority: backends.PriorityNormal,
				EmlPath: "rt.eml", Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{"u@example.net"}}}); err != nil {
				return err
			}
		}
	})
	lease := func() time.Time { return time.Now().Add(time.Minute) }
	// Intake: claim ACCEPTED, make each READY.
	drain(t, s, callers, backends.StatusAccepted, backends.StatusIntaking, limit, messages, func(id string) backends.Transition {
		return backends.Transition{ID: id, From: backends.StatusIntaking, To: backends.StatusReady, Reason: "prepared"}
	})
	// Delivery: claim READY, send, and with no plugin acknowledge at once.
	drain(t, s, callers, backends.StatusReady, backends.StatusProcessing, limit, messages, func(id string) backends.Transition {
		return backends.Transition{ID: id, From: backends.StatusProcessing, To: backends.StatusSent, Reason: "250 ok",
			Then: []backends.Step{{To: backends.StatusCallingSent}, {To: backends.StatusSentAcknowledged}}, LeaseUntil: lease()}
	})
	calls, byOp := counter.total()
	perMessage := float64(calls) / messages
	t.Logf("%d requests for %d messages: %.2f per message (%s)", calls, messages, perMessage, byOp)

	counts, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts[backends.StatusSentAcknowledged] != messages || len(counts) != 1 {
		t.Errorf("counts at the end %v, want %d SENT-ACKNOWLEDGED", counts, messages)
	}
	if perMessage > maxCallsPerMessage {
		t.Errorf("%.2f requests per message, want at most %.2f", perMessage, maxCallsPerMessage)
	}
}

// drain has callers claim from one status, each moving what it claimed
// with move, until a claim finds nothing (every message is in from before
// they start, so none comes later); then one caller takes what races left,
// and want messages must have been claimed.
func drain(t *testing.T, s backends.Outbox, callers int, from, to backends.Status, limit, want int, move func(id string) backends.Transition) {
	t.Helper()
	var claimed atomic.Int64
	claim := func() error {
		for {
			now := time.Now().UTC()
			ms, err := s.Claim(context.Background(), backends.Claim{From: from, To: to, Now: now, LeaseUntil: now.Add(time.Minute), Limit: limit})
			if err != nil || len(ms) == 0 {
				return err
			}
			claimed.Add(int64(len(ms)))
			for _, m := range ms {
				if err := s.Transition(context.Background(), move(m.ID)); err != nil {
					return err
				}
			}
		}
	}
	parallel(t, callers, claim)
	parallel(t, 1, claim)
	if n := claimed.Load(); n != int64(want) {
		t.Fatalf("%d claimed from %s, want %d", n, from, want)
	}
}

// parallel runs fn in n goroutines and fails t with their first error.
func parallel(t testing.TB, n int, fn func() error) {
	t.Helper()
	errs := make(chan error, n)
	for range n {
		go func() { errs <- fn() }()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
