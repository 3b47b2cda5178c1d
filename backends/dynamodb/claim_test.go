package dynamodb_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/dynamodb"
)

// makeReady puts n messages named prefix-0000 … in READY, due at due, of
// batch, with callers at once.
func makeReady(t testing.TB, s backends.Outbox, prefix string, n, prio int, due time.Time, batch string) {
	t.Helper()
	ctx := context.Background()
	var next atomic.Int64
	parallel(t, 8, func() error {
		for {
			i := next.Add(1) - 1
			if i >= int64(n) {
				return nil
			}
			id := fmt.Sprintf("%s-%04d", prefix, i)
			if err := s.Create(ctx, &backends.Message{ID: id, Priority: prio, Batch: batch, EmlPath: "x.eml",
				CreatedAt: due.Add(-time.Hour).Add(time.Duration(i) * time.Millisecond)}); err != nil {
				return err
			}
			lease := time.Now().Add(time.Hour)
			for _, tr := range []backends.Transition{
				{ID: id, From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: lease},
				{ID: id, From: backends.StatusIntaking, To: backends.StatusReady, DueAt: due},
			} {
				if err := s.Transition(ctx, tr); err != nil {
					return err
				}
			}
		}
	})
}

// TestClaimReadsBounded: behind 1,000 READY messages of a suspended batch,
// first in claim order, and 500 of the first priority not due yet, a claim
// finds the one message it may take in a bounded number of requests: one
// query a shard, the transaction.
func TestClaimReadsBounded(t *testing.T) {
	ctx := context.Background()
	opts := freshTable(t, 0)
	counter := counted(&opts)
	s := openStore(t, opts)
	now := time.Now().UTC()
	makeReady(t, s, "held", 1000, backends.PriorityHigh, now.Add(-time.Hour), "campaign")
	makeReady(t, s, "later", 500, backends.PriorityImmediate, now.Add(time.Hour), "")
	// Suspended once they are READY: suspending holds them.
	if err := s.SuspendBatch(ctx, "campaign"); err != nil {
		t.Fatal(err)
	}
	makeReady(t, s, "behind", 1, backends.PriorityNormal, now.Add(-time.Minute), "")

	counter.reset()
	got, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now, LeaseUntil: now.Add(time.Minute), Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	calls, byOp := counter.total()
	t.Logf("claim behind 1000 suspended and 500 not due: %d requests (%s)", calls, byOp)
	if len(got) != 1 || got[0].ID != "behind-0000" {
		t.Fatalf("claimed %v, want behind-0000", ids(got))
	}
	if max := 8 + 1; calls > max {
		t.Errorf("the claim took %d requests, want at most %d", calls, max)
	}

	// Activated, the batch's messages are claimed, all of them.
	if err := s.ActivateBatch(ctx, "campaign"); err != nil {
		t.Fatal(err)
	}
	var claimed []string
	for {
		got, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now, LeaseUntil: now.Add(time.Minute), Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		claimed = append(claimed, ids(got)...)
	}
	if len(claimed) != 1000 || !slices.IsSorted(claimed) || claimed[0] != "held-0000" {
		t.Errorf("after activation claimed %d, sorted %v, want the 1000 of the batch in order", len(claimed), slices.IsSorted(claimed))
	}
	counts, err := s.Counts(ctx)
	if err != nil || counts[backends.StatusProcessing] != 1001 || counts[backends.StatusReady] != 500 {
		t.Errorf("counts %v, %v", counts, err)
	}
}

func ids(ms []*backends.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// TestTransitionAfterRenew: a worker that renewed its lease moves its
// message holding the renewed lease, though the store remembers the copy
// it wrote when it claimed it, under the lease before the renewal.
func TestTransitionAfterRenew(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, freshTable(t, 0))
	now := time.Now().UTC()
	makeReady(t, s, "renewed", 1, backends.PriorityNormal, now.Add(-time.Minute), "")
	held := now.Add(time.Minute)
	ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing,
		Now: now, LeaseUntil: held, Limit: 1})
	if err != nil || len(ms) != 1 {
		t.Fatalf("Claim = %d messages, %v; want 1", len(ms), err)
	}
	until := now.Add(time.Hour)
	if got, err := s.Renew(ctx, backends.Renewal{IDs: ids(ms), Status: backends.StatusProcessing,
		Held: held, Until: until}); err != nil || len(got) != 1 {
		t.Fatalf("Renew = %v, %v; want %v", got, err, ids(ms))
	}
	if err := s.Transition(ctx, backends.Transition{ID: ms[0].ID, From: backends.StatusProcessing, To: backends.StatusSent,
		At: time.Now().UTC(), Reason: "sent", Held: until}); err != nil {
		t.Fatalf("transition holding the renewed lease: %v", err)
	}
	if m, err := s.Get(ctx, ms[0].ID); err != nil || m.Status != backends.StatusSent {
		t.Errorf("after the transition: %+v, %v; want SENT", m, err)
	}
}

// TestClaimNothingDueReads: on a queue with messages at every priority of
// every shard and none due, a claim reads one query a shard (DueIndex),
// and no entry: not the messages not due, nor the suspended batches, which
// only a candidate of a batch needs.
func TestClaimNothingDueReads(t *testing.T) {
	ctx := context.Background()
	opts := freshTable(t, 0)
	counter := counted(&opts)
	s := openStore(t, opts)
	now := time.Now().UTC()
	for p := backends.PriorityImmediate; p <= backends.PriorityLow; p++ {
		makeReady(t, s, fmt.Sprintf("later-%d", p), 40, p, now.Add(time.Hour), "")
	}
	claim := func() []*backends.Message {
		t.Helper()
		got, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now, LeaseUntil: now.Add(time.Minute), Limit: 256})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	for range 3 {
		counter.reset()
		if got := claim(); len(got) != 0 {
			t.Fatalf("claimed %v; none is due", ids(got))
		}
		if _, byOp := counter.total(); byOp != "Query=8" {
			t.Errorf("a claim with nothing due sent %s, want Query=8", byOp)
		}
		if entries := counter.entries(); entries != 0 {
			t.Errorf("a claim with nothing due read %d entries, want none", entries)
		}
	}
	// One message due at the last priority, behind all the others, is
	// found in the same query, and claimed in the same round trip after.
	makeReady(t, s, "now", 1, backends.PriorityLow, now.Add(-time.Minute), "")
	counter.reset()
	if got := claim(); !slices.Equal(ids(got), []string{"now-0000"}) {
		t.Errorf("claimed %v; want now-0000", ids(got))
	}
	if _, byOp := counter.total(); byOp != "ExecuteTransaction=1 Query=8" {
		t.Errorf("a claim of one message sent %s, want ExecuteTransaction=1 Query=8", byOp)
	}
}

// TestClaimManyDueInClaimOrder: when a shard has more messages due than a
// claim reads of it by due time, it is read again in claim order, so that
// the claim takes the first priority's, due last, before the others.
func TestClaimManyDueInClaimOrder(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, freshTable(t, 0))
	now := time.Now().UTC()
	makeReady(t, s, "low", 80, backends.PriorityLow, now.Add(-time.Hour), "")
	makeReady(t, s, "normal", 80, backends.PriorityNormal, now.Add(-30*time.Minute), "")
	makeReady(t, s, "first", 8, backends.PriorityImmediate, now.Add(-time.Minute), "")
	makeReady(t, s, "later", 8, backends.PriorityImmediate, now.Add(time.Hour), "")
	got, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now, LeaseUntil: now.Add(time.Minute), Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"first-0000", "first-0001", "first-0002", "first-0003", "first-0004", "first-0005", "first-0006", "first-0007", "normal-0000", "normal-0001"}
	if !slices.Equal(ids(got), want) {
		t.Errorf("claimed %v, want %v", ids(got), want)
	}
}

// TestClaimHoldsSlippedMessage: a READY message of a suspended batch that
// suspending did not hold (it became READY as the batch was suspended) is
// not claimed but held by the claim, which reads the suspended batches
// because a candidate is of a batch.
func TestClaimHoldsSlippedMessage(t *testing.T) {
	ctx := context.Background()
	opts := freshTable(t, 0)
	s := openStore(t, opts)
	now := time.Now().UTC()
	makeReady(t, s, "slipped", 1, backends.PriorityHigh, now.Add(-time.Minute), "camp")
	makeReady(t, s, "free", 1, backends.PriorityNormal, now.Add(-time.Minute), "")
	// The batch's item as SuspendBatch writes it, without its holding the
	// batch's messages after.
	client, table, err := dynamodb.Client(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	sv := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	if _, err := client.PutItem(ctx, &awsdynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
		"Id": sv("_BATCH#camp"), "Status": sv("_BATCH"), "Queue": sv("BATCHES"), "QueueKey": sv("camp"),
		"Attributes": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"SuspendedAt": sv(now.Format(time.RFC3339Nano))}}}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now, LeaseUntil: now.Add(time.Minute), Limit: 10})
	if err != nil || !slices.Equal(ids(got), []string{"free-0000"}) {
		t.Fatalf("claimed %v, %v; want free-0000 alone", ids(got), err)
	}
	if q := sOf(rawItems(t, opts, "slipped-0000")["_META"]["Queue"]); !strings.HasPrefix(q, "HELD:") {
		t.Errorf("the slipped message is in queue %q after the claim, want it held", q)
	}
}

// The relay that creates a message moves it next, without a claim
// (intake's hand-over): that move is its transaction alone, the message
// not read first.
func TestMoveAfterCreateReadsNothing(t *testing.T) {
	ctx := context.Background()
	opts := freshTable(t, 0)
	counter := counted(&opts)
	s := openStore(t, opts)
	if err := s.Create(ctx, &backends.Message{ID: "m", Priority: backends.PriorityNormal, EmlPath: "m.eml"}); err != nil {
		t.Fatal(err)
	}
	counter.reset()
	if err := s.Transition(ctx, backends.Transition{ID: "m", From: backends.StatusAccepted, To: backends.StatusReady, Route: "default"}); err != nil {
		t.Fatal(err)
	}
	if _, byOp := counter.total(); byOp != "ExecuteTransaction=1" {
		t.Errorf("the move after the create sent %s, want ExecuteTransaction=1", byOp)
	}
	if m, err := s.Get(ctx, "m"); err != nil || m.Status != backends.StatusReady || m.Route != "default" {
		t.Errorf("after the move: %+v, %v", m, err)
	}
}
