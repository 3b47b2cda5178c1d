package dynamodb_test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/dynamodb"
)

// TestCountsAcrossRelays: two stores on one table (two relays) claim,
// move and restore the same messages at once, some of their requests cut
// short as a crash would; the counts then are what the messages say.
func TestCountsAcrossRelays(t *testing.T) {
	ctx := context.Background()
	opts := freshTable(t, 0)
	var relays [2]backends.Outbox
	for i := range relays {
		relays[i] = openStore(t, opts)
	}
	const messages = 120
	var next, cut atomic.Int64
	// cutShort gives some operations a deadline that ends them midway.
	cutShort := func() (context.Context, context.CancelFunc) {
		if rand.N(3) == 0 {
			cut.Add(1)
			return context.WithTimeout(ctx, time.Duration(rand.N(8000))*time.Microsecond)
		}
		return context.WithCancel(ctx)
	}
	// run runs op with a context that cutShort may end midway.
	run := func(op func(c context.Context)) {
		c, cancel := cutShort()
		defer cancel()
		op(c)
	}
	parallel(t, 4, func() error {
		for {
			i := next.Add(1)
			if i > messages {
				return nil
			}
			run(func(c context.Context) {
				relays[i%2].Create(c, &backends.Message{ID: fmt.Sprintf("cr-%04d", i), EmlPath: "x.eml"})
			})
		}
	})
	var rounds atomic.Int64
	parallel(t, 6, func() error {
		for rounds.Add(1) <= 80 {
			s := relays[rand.N(2)]
			now := time.Now().UTC()
			var ms []*backends.Message
			switch rand.N(3) {
			case 0:
				run(func(c context.Context) {
					ms, _ = s.Claim(c, backends.Claim{From: backends.StatusAccepted, To: backends.StatusIntaking, Now: now, LeaseUntil: now.Add(time.Minute), Limit: 7})
				})
				for _, m := range ms {
					run(func(c context.Context) {
						s.Transition(c, backends.Transition{ID: m.ID, From: backends.StatusIntaking, To: backends.StatusReady})
					})
				}
			case 1:
				run(func(c context.Context) {
					ms, _ = s.Claim(c, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now, LeaseUntil: now.Add(time.Minute), Limit: 7})
				})
				for _, m := range ms {
					run(func(c context.Context) {
						s.Transition(c, backends.Transition{ID: m.ID, From: backends.StatusProcessing, To: backends.StatusSent,
							Then: []backends.Step{{To: backends.StatusCallingSent}, {To: backends.StatusSentAcknowledged}}, LeaseUntil: now.Add(time.Minute)})
					})
				}
			default:
				run(func(c context.Context) { s.Restore(c, now.Add(2*time.Minute)) }) // every lease has run out
			}
		}
		return nil
	})
	// A request cut short on this side may still be running on
	// DynamoDB's: compare once two readings in a row agree, for at most a
	// minute; counts that drifted never agree with the messages.
	var want, got map[backends.Status]int
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		before := statuses(t, relays[0])
		var err error
		if got, err = relays[1].Counts(ctx); err != nil {
			t.Fatal(err)
		}
		want = statuses(t, relays[0])
		if (maps.Equal(before, want) && maps.Equal(got, want)) || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("%d operations cut short; statuses %v", cut.Load(), want)
	if !maps.Equal(got, want) {
		t.Errorf("counts %v, want %v as the messages say", got, want)
	}
	if cut.Load() == 0 || want[backends.StatusSentAcknowledged] == 0 {
		t.Errorf("%d operations cut short, statuses %v: the test did not do what it is for", cut.Load(), want)
	}
}

// statuses counts the messages in each status, as List gives them.
func statuses(t *testing.T, s backends.Outbox) map[backends.Status]int {
	t.Helper()
	out := map[backends.Status]int{}
	var after string
	for {
		page, next, err := s.List(context.Background(), backends.ListQuery{After: after, Limit: 50})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page {
			out[m.Status]++
		}
		if next == "" {
			return out
		}
		after = next
	}
}

// TestCountsOfNewStatus: a table counted before SUPPRESSED existed has no
// number for it in its counter items, nor in the activity items of a
// minute a relay of that version made; a store opened on it moves a
// message to SUPPRESSED and counts it, with no create-table run.
func TestCountsOfNewStatus(t *testing.T) {
	ctx := context.Background()
	opts := freshTable(t, 0)
	client, table, err := dynamodb.Client(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	st := backends.StatusSuppressed
	for i := range 16 {
		_, err := client.UpdateItem(ctx, &awsdynamodb.UpdateItemInput{TableName: aws.String(table),
			Key:              map[string]types.AttributeValue{"Id": &types.AttributeValueMemberS{Value: fmt.Sprintf("_COUNT#%d", i)}, "Status": &types.AttributeValueMemberS{Value: "_COUNT"}},
			UpdateExpression: aws.String("REMOVE #st"), ExpressionAttributeNames: map[string]string{"#st": string(st)}})
		if err != nil {
			t.Fatal(err)
		}
		// This minute's and the next, should the minute turn meanwhile.
		for _, m := range []time.Time{backends.MinuteOf(time.Now()), backends.MinuteOf(time.Now()).Add(time.Minute)} {
			it := map[string]types.AttributeValue{"Id": &types.AttributeValueMemberS{Value: fmt.Sprintf("_ACTIVITY#%d", i)},
				"Status": &types.AttributeValueMemberS{Value: m.UTC().Format("20060102T150405.000000000")}}
			for _, a := range backends.Activities() {
				if a != backends.ActivitySuppressed {
					it[string(a)] = &types.AttributeValueMemberN{Value: "0"}
				}
			}
			if _, err := client.PutItem(ctx, &awsdynamodb.PutItemInput{TableName: aws.String(table), Item: it}); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := openStore(t, opts)
	if err := s.Create(ctx, &backends.Message{ID: "sup-1", EmlPath: "x.eml"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Transition(ctx, backends.Transition{ID: "sup-1", From: backends.StatusAccepted, To: st}); err != nil {
		t.Fatalf("move to %s: %v", st, err)
	}
	counts, err := s.Counts(ctx)
	if err != nil || counts[st] != 1 || len(counts) != 1 {
		t.Errorf("counts %v %v, want 1 %s", counts, err, st)
	}
	minutes, err := s.Minutes(ctx, time.Now().Add(-time.Hour))
	done := 0
	for _, m := range minutes {
		done += m.Counts[backends.ActivitySuppressed]
	}
	if err != nil || done != 1 {
		t.Errorf("minutes %+v %v, want 1 %s", minutes, err, backends.ActivitySuppressed)
	}
}
