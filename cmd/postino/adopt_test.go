package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends/dynamodb"
	"github.com/genropy/postino/backends/dynamodb/dynamodbtest"
	"github.com/genropy/postino/backends/mysql"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay/admin"
)

// seedVolume writes, on a directory standing for the seed's shared volume,
// a message and the JSON payload that holds its envelope, and gives their
// absolute paths.
func seedVolume(t *testing.T) (eml, payload string) {
	t.Helper()
	volume := t.TempDir()
	eml = filepath.Join(volume, "legacy-ready.eml")
	payload = filepath.Join(volume, "legacy-ready.json")
	if err := os.WriteFile(eml, []byte("From: App <app@example.com>\r\nTo: shown@example.net\r\nSubject: from the old relay\r\n\r\nhello\r\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(payload, []byte(`{"from": "app@example.com", "to": ["one@example.net", "two@example.net"]}`), 0o640); err != nil {
		t.Fatal(err)
	}
	return eml, payload
}

// checkTakenOver checks the report of a take-over (out) of legacy-ready,
// READY at the paths seedVolume gives, legacy-lost, READY with no message
// file, and legacy-done, SENT-ACKNOWLEDGED; then runs a relay on the store
// and waits for legacy-ready to be delivered to its payload's recipients,
// and legacy-lost to end INVALID.
func checkTakenOver(t *testing.T, out string, store, env []string) {
	t.Helper()
	for _, want := range []string{"READY                        2", "SENT-ACKNOWLEDGED            1", "taken over: 1 on their way",
		"could not: 1 name no message file"} {
		if !strings.Contains(out, want) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	ctx := context.Background()
	up := smtptest.Start(t, smtptest.Options{})
	p := startProcess(t, buildBinary(t), t.TempDir(), append(store, "--smarthost", up.Addr), env)
	c := &admin.Client{Base: p.admin}
	for id, want := range map[string]string{"legacy-ready": "SENT-ACKNOWLEDGED", "legacy-lost": "INVALID-ACKNOWLEDGED"} {
		var m admin.Message
		var err error
		waitFor(t, 60*time.Second, func() string { return fmt.Sprintf("%s: %+v, %v; want %s", id, m, err, want) },
			func() bool { m, err = c.Get(ctx, id); return err == nil && m.Status == want })
	}
	msgs := up.Messages()
	if len(msgs) != 1 || msgs[0].From != "app@example.com" || !slices.Equal(msgs[0].To, []string{"one@example.net", "two@example.net"}) ||
		!strings.Contains(string(msgs[0].Data), "from the old relay") {
		t.Errorf("the upstream got %+v; want the old message once, to the payload's recipients", msgs)
	}
}

// TestAdoptSeedOutbox takes over, in place, a MariaDB outbox as the seed's
// relay leaves it: a READY row whose message and JSON payload sit at
// absolute paths on the old shared volume is delivered to the recipients
// its payload names, and reported; one naming no message file is reported
// INVALID with what to do.
func TestAdoptSeedOutbox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a relay process")
	}
	dsn := emptyDatabase(t)
	eml, payload := seedVolume(t)
	db, err := mysql.Connect(context.Background(), dsn, mysql.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	// The seed's tables, from the file that keeps their layout.
	seed, err := os.ReadFile(filepath.Join("..", "..", "backends", "mysql", "migrations", "0001_seed.sql"))
	if err != nil {
		t.Fatal(err)
	}
	statements := strings.Split(strings.TrimSpace(string(seed)), ";")
	statements = slices.DeleteFunc(statements, func(st string) bool { return strings.TrimSpace(st) == "" })
	for _, st := range append(statements,
		`INSERT INTO emails (id, status, eml_file_path, payload_file_path, reason) VALUES
			('legacy-ready', 'READY', '`+eml+`', '`+payload+`', 'queued by the old relay'),
			('legacy-lost', 'READY', NULL, NULL, ''),
			('legacy-done', 'SENT-ACKNOWLEDGED', '/efs/done.eml', NULL, '250 ok')`) {
		if _, err := db.Exec(st); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	out, errOut, code := cli(t, "migrate", "--backend", "mysql", "--dsn", dsn)
	if code != 0 {
		t.Fatalf("migrate: %s", errOut)
	}
	checkTakenOver(t, out, []string{"--backend", "mysql", "--dsn", dsn}, nil)
}

// TestAdoptSeedDynamoDB takes over, in place, a DynamoDB table as the
// seed's relay leaves it, as TestAdoptSeedOutbox does a MariaDB outbox:
// postino dynamodb create-table reports what it found and did.
func TestAdoptSeedDynamoDB(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a relay process")
	}
	env := dynamoDBEnv(t)
	table := fmt.Sprintf("seed_adopt_%d", time.Now().UnixNano())
	eml, payload := seedVolume(t)
	seedDynamoDBTable(t, table, map[string]map[string]string{
		"legacy-ready": {"Latest": "READY", "EmlFilePath": eml, "PayloadFilePath": payload, "Reason": "queued by the old relay"},
		"legacy-lost":  {"Latest": "READY"},
		"legacy-done":  {"Latest": "SENT-ACKNOWLEDGED", "EmlFilePath": "/efs/done.eml", "Reason": "250 ok"},
	})

	out, errOut, code := cli(t, "dynamodb", "create-table", "--table", table)
	if code != 0 {
		t.Fatalf("create-table: %s", errOut)
	}
	checkTakenOver(t, out, []string{"--backend", "dynamodb", "--table", table}, env)
}

// seedDynamoDBTable creates a table of the seed's shape holding messages
// as the seed's writer leaves them (a _META item with these Attributes, and
// the item of its status), and deletes it at the end, once its indexes are
// built: DynamoDB Local stops building indexes for good when a table is
// deleted while one is.
func seedDynamoDBTable(t *testing.T, table string, messages map[string]map[string]string) {
	t.Helper()
	ctx := context.Background()
	client, _, err := dynamodb.Client(ctx, dynamodb.Options{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	dynamodbtest.SeedTable(t, client, table)
	sv := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	for id, attrs := range messages {
		a := map[string]types.AttributeValue{"UpdatedAt": sv("2026-01-02T03:04:05Z")}
		for k, v := range attrs {
			a[k] = sv(v)
		}
		for _, item := range []map[string]types.AttributeValue{
			{"Id": sv(id), "Status": sv("_META"), "Version": &types.AttributeValueMemberN{Value: "0"}, "Attributes": &types.AttributeValueMemberM{Value: a}},
			{"Id": sv(id), "Status": sv(attrs["Latest"]), "Attributes": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"UpdatedAt": sv("2026-01-02T03:04:05Z")}}},
		} {
			if _, err := client.PutItem(ctx, &awsdynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
				t.Fatal(err)
			}
		}
	}
}
