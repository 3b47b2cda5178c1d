package dynamodb_test

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/dynamodb"
)

// putSeedMessage writes a message as the seed's writer leaves it: its
// _META item (Attributes.Latest, no envelope, Version 0, the TTL in
// Attributes) and one item per status it reached.
func putSeedMessage(t *testing.T, opts dynamodb.Options, id, eml, payload, reason string, reached ...string) {
	t.Helper()
	ctx := context.Background()
	client, table, err := dynamodb.Client(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	sv := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	put := func(sk string, attrs map[string]types.AttributeValue) {
		item := map[string]types.AttributeValue{"Id": sv(id), "Status": sv(sk), "Attributes": &types.AttributeValueMemberM{Value: attrs}}
		if sk == "_META" {
			item["Version"] = &types.AttributeValueMemberN{Value: "0"}
		}
		if _, err := client.PutItem(ctx, &awsdynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range reached {
		put(st, map[string]types.AttributeValue{"UpdatedAt": sv("2026-01-02T03:04:05Z"), "Reason": sv(reason)})
	}
	meta := map[string]types.AttributeValue{"Latest": sv(reached[len(reached)-1]), "UpdatedAt": sv("2026-01-02T03:04:05Z"), "Reason": sv(reason),
		"TTL": &types.AttributeValueMemberN{Value: "1900000000"}}
	if eml != "" {
		meta["EmlFilePath"] = sv(eml)
	}
	if payload != "" {
		meta["PayloadFilePath"] = sv(payload)
	}
	put("_META", meta)
}

// TestAdoptSeedMessages: after create-table, every message the seed left
// in a status of its own is taken over or told, with exact counts; intake
// claims those on their way and gives them their envelope; the seed's own
// query still finds them; a second run does nothing again.
func TestAdoptSeedMessages(t *testing.T) {
	ctx := context.Background()
	opts := seedTable(t)
	putSeedMessage(t, opts, "r-ready", "/efs/r-ready.eml", "/efs/r-ready.json", "ready", "ACCEPTED", "READY")
	putSeedMessage(t, opts, "r-proc", "/efs/r-proc.eml", "", "sending", "ACCEPTED", "READY", "PROCESSING")
	putSeedMessage(t, opts, "r-acc", "/efs/r-acc.eml", "/efs/r-acc.json", "", "ACCEPTED")
	putSeedMessage(t, opts, "r-noeml", "", "/efs/r-noeml.json", "", "ACCEPTED", "READY")
	putSeedMessage(t, opts, "r-sent", "/efs/r-sent.eml", "", "250 ok", "ACCEPTED", "READY", "PROCESSING", "SENT")
	putSeedMessage(t, opts, "r-calling", "/efs/r-calling.eml", "", "550 no such user", "FAILED", "CALLING-FAILED-CALLBACK")
	putSeedMessage(t, opts, "r-done", "/efs/r-done.eml", "", "250 ok", "SENT", "SENT-ACKNOWLEDGED")

	if _, _, err := dynamodb.CreateTable(ctx, opts); err != nil {
		t.Fatal(err)
	}
	got, err := dynamodb.Adopt(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}

	s := openStore(t, opts)
	backendtest.CheckSeedAdoption(t, s, got, "r-done")
	wantCounts := map[backends.Status]int{backends.StatusAccepted: 3, backends.StatusInvalid: 1, backends.StatusSent: 1,
		backends.StatusFailed: 1, backends.StatusSentAcknowledged: 1}
	if counts, err := s.Counts(ctx); err != nil || !maps.Equal(counts, wantCounts) {
		t.Errorf("counts after the adoption %v, %v; want %v", counts, err, wantCounts)
	}
	if got := statuses(t, s); !maps.Equal(got, wantCounts) {
		t.Errorf("the messages say %v; want %v", got, wantCounts)
	}
	if m, _ := s.Get(ctx, "r-sent"); m.TTL == nil || *m.TTL != 1900000000 {
		t.Errorf("r-sent lost the seed's TTL: %+v", m)
	}
	if h, _ := s.History(ctx, "r-ready"); len(h) != 3 || h[2].Status != backends.StatusAccepted {
		t.Errorf("r-ready history %+v; want the seed's two steps, then ACCEPTED", h)
	}

	// The seed's own query by status finds the messages taken over.
	client, table, _ := dynamodb.Client(ctx, opts)
	out, err := client.ExecuteStatement(ctx, &awsdynamodb.ExecuteStatementInput{
		Statement:  aws.String(`SELECT Id FROM "` + table + `"."StatusIndex" WHERE Status=? AND Attributes.Latest =?`),
		Parameters: []types.AttributeValue{&types.AttributeValueMemberS{Value: "_META"}, &types.AttributeValueMemberS{Value: "ACCEPTED"}}})
	if err != nil {
		t.Fatal(err)
	}
	var seedIDs []string
	for _, it := range out.Items {
		seedIDs = append(seedIDs, sOf(it["Id"]))
	}
	if slices.Sort(seedIDs); !slices.Equal(seedIDs, []string{"r-acc", "r-proc", "r-ready"}) {
		t.Errorf("the seed's query for ACCEPTED found %v", seedIDs)
	}

	// Intake claims them and gives each its envelope.
	now := time.Now()
	ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusAccepted, To: backends.StatusIntaking, Now: now.Add(time.Minute),
		LeaseUntil: now.Add(time.Hour), Limit: 10})
	if err != nil || len(ms) != 3 {
		t.Fatalf("claim of the messages taken over = %d, %v; want 3", len(ms), err)
	}
	for _, m := range ms {
		if len(m.Envelope.Recipients) != 0 || m.EmlPath == "" || (m.ID == "r-ready") != (m.PayloadPath == "/efs/r-ready.json") && m.ID != "r-acc" {
			t.Errorf("claimed %+v: want no envelope, and its paths", m)
		}
	}
	env := &backends.Envelope{Sender: "app@example.com", Recipients: []string{"one@example.net"}}
	if err := s.Transition(ctx, backends.Transition{ID: "r-ready", From: backends.StatusIntaking, To: backends.StatusReady, Envelope: env}); err != nil {
		t.Fatal(err)
	}
	if m, _ := s.Get(ctx, "r-ready"); !slices.Equal(m.Envelope.Recipients, env.Recipients) || m.Envelope.Sender != env.Sender {
		t.Errorf("r-ready's envelope after intake: %+v", m.Envelope)
	}

	// Once more: nothing is done twice.
	again, err := dynamodb.Adopt(ctx, opts)
	if want := map[backends.Status]int{backends.StatusSentAcknowledged: 1}; err != nil || !maps.Equal(again.Found, want) ||
		again.Queued+again.Told+again.Unsendable != 0 {
		t.Errorf("a second Adopt = %+v, %v; want only the acknowledged one found, nothing done", again, err)
	}
	if evs, _ := s.Events(ctx, "r-sent"); len(evs) != 1 {
		t.Errorf("r-sent events after two adoptions: %+v", evs)
	}
	wantCounts[backends.StatusAccepted], wantCounts[backends.StatusIntaking], wantCounts[backends.StatusReady] = 0, 2, 1
	delete(wantCounts, backends.StatusAccepted)
	if counts, err := s.Counts(ctx); err != nil || !maps.Equal(counts, wantCounts) {
		t.Errorf("counts after intake and a second adoption %v, %v; want %v", counts, err, wantCounts)
	}
}

// TestSeedMessageRetried: a message the seed finished, which adoption
// leaves as it is, moves on under Postino to a status the seed's items
// already hold (an operator's retry) without colliding with them.
func TestSeedMessageRetried(t *testing.T) {
	ctx := context.Background()
	opts := seedTable(t)
	putSeedMessage(t, opts, "r-failed", "/efs/r-failed.eml", "", "550 no such user",
		"ACCEPTED", "READY", "PROCESSING", "FAILED", "CALLING-FAILED-CALLBACK", "FAILED-ACKNOWLEDGED")
	if _, _, err := dynamodb.CreateTable(ctx, opts); err != nil {
		t.Fatal(err)
	}
	if a, err := dynamodb.Adopt(ctx, opts); err != nil || a.Queued+a.Told+a.Unsendable != 0 {
		t.Fatalf("Adopt = %+v, %v; want nothing done", a, err)
	}
	s := openStore(t, opts)
	if err := s.Transition(ctx, backends.Transition{ID: "r-failed", From: backends.StatusFailedAcknowledged, To: backends.StatusReady, Reason: "retry"}); err != nil {
		t.Fatal(err)
	}
	h, err := s.History(ctx, "r-failed")
	if err != nil || len(h) != 7 || h[6].Status != backends.StatusReady || h[6].Reason != "retry" {
		t.Errorf("history after the retry %+v, %v; want the seed's six steps, then READY", h, err)
	}
	if counts, err := s.Counts(ctx); err != nil || !maps.Equal(counts, map[backends.Status]int{backends.StatusReady: 1}) {
		t.Errorf("counts after the retry %v, %v", counts, err)
	}
}
