package dynamodb_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/dynamodb"
	"github.com/genropy/postino/backends/dynamodb/dynamodbtest"
)

// rawItems reads every item of a message as stored.
func rawItems(t *testing.T, opts dynamodb.Options, id string) map[string]map[string]types.AttributeValue {
	t.Helper()
	client, table, err := dynamodb.Client(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Query(context.Background(), &awsdynamodb.QueryInput{TableName: aws.String(table),
		KeyConditionExpression:    aws.String("Id = :id"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":id": &types.AttributeValueMemberS{Value: id}}})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]types.AttributeValue{}
	for _, it := range resp.Items {
		out[it["Status"].(*types.AttributeValueMemberS).Value] = it
	}
	return out
}

func ttlAt(it map[string]types.AttributeValue) string {
	if v, ok := it["TTL"].(*types.AttributeValueMemberN); ok {
		return v.Value
	}
	return ""
}

func TestLayoutTTLAndReentry(t *testing.T) {
	ctx := context.Background()
	opts := freshTable(t, 24*time.Hour)
	s := openStore(t, opts)
	if err := s.Create(ctx, &backends.Message{ID: "layout-1", Priority: 2, EmlPath: "x.eml"}); err != nil {
		t.Fatal(err)
	}
	lease := time.Now().Add(time.Minute)
	steps := []backends.Transition{
		{From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: lease},
		{From: backends.StatusIntaking, To: backends.StatusReady},
		{From: backends.StatusReady, To: backends.StatusProcessing, LeaseUntil: lease},
		{From: backends.StatusProcessing, To: backends.StatusReady, AddAttempt: true, Reason: "451 later"},
		{From: backends.StatusReady, To: backends.StatusProcessing, LeaseUntil: lease},
	}
	for _, st := range steps {
		st.ID = "layout-1"
		if err := s.Transition(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	items := rawItems(t, opts, "layout-1")
	var keys []string
	for k := range items {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"ACCEPTED", "INTAKING", "PROCESSING", "PROCESSING#2", "READY", "READY#2", "_META"}
	if !slices.Equal(keys, want) {
		t.Errorf("items %v, want %v", keys, want)
	}
	meta := items["_META"]
	if latest := meta["Attributes"].(*types.AttributeValueMemberM).Value["Latest"].(*types.AttributeValueMemberS).Value; latest != "PROCESSING" {
		t.Errorf("Attributes.Latest = %s", latest)
	}
	if v := meta["Version"].(*types.AttributeValueMemberN).Value; v != "0" {
		t.Errorf("Version = %s, want 0", v)
	}
	if ttlAt(meta) == "" || ttlAt(meta) != ttlAt(items["PROCESSING#2"]) {
		t.Errorf("the TTL of _META (%s) and of the newest status item (%s) must be there and equal", ttlAt(meta), ttlAt(items["PROCESSING#2"]))
	}
	for k, it := range items {
		if ttlAt(it) == "" {
			t.Errorf("%s has no TTL", k)
		}
	}
	m, _ := s.Get(ctx, "layout-1")
	if m.TTL == nil || *m.TTL < time.Now().Add(23*time.Hour).Unix() {
		t.Errorf("message TTL %v", m.TTL)
	}
	h, _ := s.History(ctx, "layout-1")
	var got []string
	for _, e := range h {
		got = append(got, string(e.Status))
	}
	if strings.Join(got, " ") != "ACCEPTED INTAKING READY PROCESSING READY PROCESSING" {
		t.Errorf("history %v", got)
	}
}

// TestLegacyItems: a table of the seed's shape, with items as the seed's
// writer left them, is upgraded by create-table, and then read, listed,
// counted and claimed from.
func TestLegacyItems(t *testing.T) {
	ctx := context.Background()
	opts := seedTable(t)
	client, table, _ := dynamodb.Client(ctx, opts)
	put := func(item map[string]types.AttributeValue) {
		if _, err := client.PutItem(ctx, &awsdynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	sv := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	nv := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	attrs := func(kv ...string) types.AttributeValue {
		m := map[string]types.AttributeValue{}
		for i := 0; i < len(kv); i += 2 {
			if kv[i] == "TTL" {
				m[kv[i]] = nv(kv[i+1])
			} else {
				m[kv[i]] = sv(kv[i+1])
			}
		}
		return &types.AttributeValueMemberM{Value: m}
	}
	// As the seed's writer left them: TTL inside Attributes, no Postino fields.
	put(map[string]types.AttributeValue{"Id": sv("legacy-1"), "Status": sv("_META"), "Version": nv("0"),
		"Attributes": attrs("Latest", "SENT-ACKNOWLEDGED", "UpdatedAt", "2026-01-02T03:04:05Z", "Reason", "done",
			"EmlFilePath", "/efs/legacy-1.eml", "TTL", "1900000000")})
	put(map[string]types.AttributeValue{"Id": sv("legacy-1"), "Status": sv("ACCEPTED"), "Attributes": attrs("UpdatedAt", "2026-01-02T03:00:00Z")})
	put(map[string]types.AttributeValue{"Id": sv("legacy-1"), "Status": sv("SENT"), "Attributes": attrs("UpdatedAt", "2026-01-02T03:04:00Z", "Reason", "ok")})
	put(map[string]types.AttributeValue{"Id": sv("legacy-2"), "Status": sv("_META"), "Version": nv("0"),
		"Attributes": attrs("Latest", "READY", "UpdatedAt", "2026-01-02T03:04:05Z")})
	// An alarm as a Postino before shards wrote it.
	put(map[string]types.AttributeValue{"Id": sv("legacy-2"), "Status": sv("_ALARM#pec"), "Queue": sv("ALARM:pec"),
		"QueueKey": sv("20260102T030405.000000000#legacy-2"), "At": sv("2026-01-02T03:04:05Z")})

	if _, err := dynamodb.Open(ctx, opts); err == nil || !strings.Contains(err.Error(), "postino dynamodb create-table") {
		t.Fatalf("Open on a seed table: %v", err)
	}
	if _, _, err := dynamodb.CreateTable(ctx, opts); err != nil {
		t.Fatal(err)
	}
	s := openStore(t, opts)
	m, err := s.Get(ctx, "legacy-1")
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != backends.StatusSentAcknowledged || m.EmlPath != "/efs/legacy-1.eml" || m.TTL == nil || *m.TTL != 1900000000 {
		t.Errorf("legacy message %+v", m)
	}
	if m2, _ := s.Get(ctx, "legacy-2"); m2.TTL != nil {
		t.Errorf("a message without TTL got %v", *m2.TTL)
	}
	h, _ := s.History(ctx, "legacy-1")
	if len(h) != 2 || h[0].Status != backends.StatusAccepted || h[1].Status != backends.StatusSent {
		t.Errorf("legacy history %+v", h)
	}
	page, _, err := s.List(ctx, backends.ListQuery{Status: backends.StatusReady, Limit: 10})
	if err != nil || len(page) != 1 || page[0].ID != "legacy-2" {
		t.Errorf("list READY %+v, %v", page, err)
	}
	if due, err := s.DueAlarms(ctx, "pec", time.Now(), 10); err != nil || len(due) != 1 || due[0].MessageID != "legacy-2" {
		t.Errorf("due alarms %+v, %v", due, err)
	}
	// create-table counted them.
	counts, err := s.Counts(ctx)
	if want := map[backends.Status]int{backends.StatusSentAcknowledged: 1, backends.StatusReady: 1}; err != nil || !maps.Equal(counts, want) {
		t.Errorf("counts %v, %v; want %v", counts, err, want)
	}
	// A legacy row is claimed and moves on under Postino.
	now := time.Now()
	claimed, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now, LeaseUntil: now.Add(time.Minute), Limit: 5})
	if err != nil || len(claimed) != 1 || claimed[0].ID != "legacy-2" {
		t.Fatalf("claim %+v, %v", claimed, err)
	}
	if err := s.Transition(ctx, backends.Transition{ID: "legacy-2", From: backends.StatusProcessing, To: backends.StatusSent}); err != nil {
		t.Fatal(err)
	}
	if counts, _ := s.Counts(ctx); counts[backends.StatusSent] != 1 || counts[backends.StatusReady] != 0 {
		t.Errorf("counts after the move %v", counts)
	}
}

// seedTable creates a table of the seed's shape, with a name of its own
// (test runs side by side do not share it).
func seedTable(t *testing.T) dynamodb.Options {
	t.Helper()
	ctx := context.Background()
	opts := dynamodb.Options{Table: fmt.Sprintf("seed_shaped_%d_%d", os.Getpid(), tables.Add(1)), Endpoint: endpoint()}
	freshTable(t, 0) // skips or fails without DynamoDB Local
	client, table, _ := dynamodb.Client(ctx, opts)
	client.DeleteTable(ctx, &awsdynamodb.DeleteTableInput{TableName: aws.String(table)})
	dynamodbtest.SeedTable(t, client, table)
	return opts
}

func TestCreateTableUpgradesSeedTable(t *testing.T) {
	ctx := context.Background()
	opts := seedTable(t)
	if _, err := dynamodb.Open(ctx, opts); err == nil || !strings.Contains(err.Error(), "postino dynamodb create-table") {
		t.Fatalf("Open on a seed table: %v", err)
	}
	for range 2 { // twice: the second finds everything there
		_, indexes, err := dynamodb.CreateTable(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(indexes, "StatusIndex") || !slices.Contains(indexes, "QueueIndex") {
			t.Errorf("indexes %v, want the seed's StatusIndex kept beside the relay's", indexes)
		}
	}
	if _, err := dynamodb.Open(ctx, opts); err != nil {
		t.Fatalf("Open after create-table: %v", err)
	}
}

// TestLayoutShards: a message's _META item keeps the seed's attributes, so
// that the seed's query by status finds it, and carries its shard beside
// them; a held message stays READY for the seed; the counter items and the
// layout item are where a reader of the table finds them.
func TestLayoutShards(t *testing.T) {
	ctx := context.Background()
	opts := createFresh(t, dynamodb.Options{SeedIndex: true})
	s := openStore(t, opts)
	if err := s.Create(ctx, &backends.Message{ID: "shard-1", Batch: "camp", EmlPath: "x.eml"}); err != nil {
		t.Fatal(err)
	}
	lease := time.Now().Add(time.Minute)
	for _, tr := range []backends.Transition{
		{ID: "shard-1", From: backends.StatusAccepted, To: backends.StatusIntaking, LeaseUntil: lease},
		{ID: "shard-1", From: backends.StatusIntaking, To: backends.StatusReady},
	} {
		if err := s.Transition(ctx, tr); err != nil {
			t.Fatal(err)
		}
	}
	client, table, _ := dynamodb.Client(ctx, opts)
	seedQuery := func() []string {
		t.Helper()
		// As the seed's tool asks: StatusIndex, Status _META, Attributes.Latest.
		out, err := client.ExecuteStatement(ctx, &awsdynamodb.ExecuteStatementInput{
			Statement:  aws.String(`SELECT Id, Status, Attributes, TTL FROM "` + table + `"."StatusIndex" WHERE Status=? AND Attributes.Latest =?`),
			Parameters: []types.AttributeValue{&types.AttributeValueMemberS{Value: "_META"}, &types.AttributeValueMemberS{Value: "READY"}}})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, it := range out.Items {
			ids = append(ids, sOf(it["Id"]))
		}
		return ids
	}
	meta := func() map[string]types.AttributeValue { return rawItems(t, opts, "shard-1")["_META"] }
	m := meta()
	shard := strings.TrimPrefix(sOf(m["MetaShard"]), "_META#")
	if n, err := strconv.Atoi(shard); err != nil || n < 0 || n >= 8 {
		t.Fatalf("MetaShard %q, want _META#0 … _META#7", sOf(m["MetaShard"]))
	}
	if q := sOf(m["Queue"]); q != "READY#"+shard {
		t.Errorf("Queue %q, want READY#%s", q, shard)
	}
	if sOf(m["Status"]) != "_META" || sOf(attrsOf(m)["Latest"]) != "READY" || m["Version"].(*types.AttributeValueMemberN).Value != "0" {
		t.Errorf("the seed's attributes changed: %v", m)
	}
	if got := seedQuery(); !slices.Equal(got, []string{"shard-1"}) {
		t.Errorf("the seed's query for READY found %v", got)
	}

	if err := s.SuspendBatch(ctx, "camp"); err != nil {
		t.Fatal(err)
	}
	if q := sOf(meta()["Queue"]); q != "HELD:READY#"+shard {
		t.Errorf("held message's Queue %q, want HELD:READY#%s", q, shard)
	}
	if got := seedQuery(); !slices.Equal(got, []string{"shard-1"}) {
		t.Errorf("held, the seed's query for READY found %v", got)
	}
	if err := s.ActivateBatch(ctx, "camp"); err != nil {
		t.Fatal(err)
	}
	if q := sOf(meta()["Queue"]); q != "READY#"+shard {
		t.Errorf("after activation Queue %q, want READY#%s", q, shard)
	}

	scan, err := client.Scan(ctx, &awsdynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	sums := map[string]int{}
	counters, layouts := 0, 0
	for _, it := range scan.Items {
		switch sOf(it["Status"]) {
		case "_COUNT":
			counters++
			for _, st := range backends.Statuses() {
				n, _ := strconv.Atoi(it[string(st)].(*types.AttributeValueMemberN).Value)
				sums[string(st)] += n
			}
		case "_LAYOUT":
			layouts++
			if it["Shards"].(*types.AttributeValueMemberN).Value != "8" {
				t.Errorf("layout item %v", it)
			}
		}
	}
	if counters != 16 || layouts != 1 {
		t.Errorf("%d counter items and %d layout items, want 16 and 1", counters, layouts)
	}
	for st, n := range sums {
		if want := map[string]int{"READY": 1}[st]; n != want {
			t.Errorf("counter items of %s sum to %d, want %d", st, n, want)
		}
	}
}

func sOf(v types.AttributeValue) string {
	if s, ok := v.(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func attrsOf(item map[string]types.AttributeValue) map[string]types.AttributeValue {
	if m, ok := item["Attributes"].(*types.AttributeValueMemberM); ok {
		return m.Value
	}
	return nil
}

// TestCreateTableRelaysEarlierLayout: a table laid out by an earlier
// version (counter items per status, batches found through the seed's
// StatusIndex) is refused with what to run, and create-table lays it out
// again: the old counters gone, the counts right, the suspended batch
// found where claims read it, and its message still held.
func TestCreateTableRelaysEarlierLayout(t *testing.T) {
	ctx := context.Background()
	opts := createFresh(t, dynamodb.Options{SeedIndex: true})
	s := openStore(t, opts)
	makeReady(t, s, "held", 1, backends.PriorityNormal, time.Now().Add(-time.Minute), "camp")
	if err := s.SuspendBatch(ctx, "camp"); err != nil {
		t.Fatal(err)
	}
	client, table, err := dynamodb.Client(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	sv := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	// As the earlier layout left them: no Version, a counter per status,
	// the batch item in no queue.
	for _, it := range []map[string]types.AttributeValue{
		{"Id": sv("_LAYOUT"), "Status": sv("_LAYOUT"), "Shards": n("8")},
		{"Id": sv("_COUNT#READY#3"), "Status": sv("_COUNT"), "N": n("1")},
	} {
		if _, err := client.PutItem(ctx, &awsdynamodb.PutItemInput{TableName: aws.String(table), Item: it}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := client.UpdateItem(ctx, &awsdynamodb.UpdateItemInput{TableName: aws.String(table),
		Key:              map[string]types.AttributeValue{"Id": sv("_BATCH#camp"), "Status": sv("_BATCH")},
		UpdateExpression: aws.String("REMOVE #q, QueueKey"), ExpressionAttributeNames: map[string]string{"#q": "Queue"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := dynamodb.Open(ctx, opts); err == nil || !strings.Contains(err.Error(), "postino dynamodb create-table") {
		t.Fatalf("Open on an earlier layout: %v", err)
	}
	_, indexes, err := dynamodb.CreateTable(ctx, dynamodb.Options{Table: opts.Table, Endpoint: opts.Endpoint})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(indexes, "StatusIndex") {
		t.Errorf("indexes %v: the seed's StatusIndex the table had is gone", indexes)
	}
	s = openStore(t, opts)
	if got := rawItems(t, opts, "_COUNT#READY#3"); len(got) != 0 {
		t.Errorf("the earlier layout's counter is still there: %v", got)
	}
	if got, err := s.Counts(ctx); err != nil || !maps.Equal(got, map[backends.Status]int{backends.StatusReady: 1}) {
		t.Errorf("counts after create-table: %v, %v", got, err)
	}
	if got, err := s.SuspendedBatches(ctx); err != nil || !slices.Equal(got, []string{"camp"}) {
		t.Errorf("suspended batches after create-table: %v, %v; want the earlier layout's camp", got, err)
	}
	if q := sOf(rawItems(t, opts, "held-0000")["_META"]["Queue"]); !strings.HasPrefix(q, "HELD:") {
		t.Errorf("the suspended batch's message is in queue %q after create-table, want it held", q)
	}
	now := time.Now().UTC()
	if got, err := s.Claim(ctx, backends.Claim{From: backends.StatusReady, To: backends.StatusProcessing, Now: now,
		LeaseUntil: now.Add(time.Minute), Limit: 10}); err != nil || len(got) != 0 {
		t.Errorf("a claim took %v, %v; the batch is suspended", ids(got), err)
	}
}
