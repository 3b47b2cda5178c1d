package relay_test

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/genropy/postino/backends/dynamodb"
	"github.com/genropy/postino/backends/mysql"
	"github.com/genropy/postino/backends/postgres"
	"github.com/genropy/postino/backends/postgres/pgtest"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/admin"
	"github.com/genropy/postino/relay/pec"
	"github.com/genropy/postino/relay/pec/pectest"
)

// mysqlOutbox makes a migrated MySQL database for one test, dropped at its
// end, and returns its DSN.
func mysqlOutbox(t *testing.T) string {
	t.Helper()
	base := os.Getenv("TEST_POSTINO_MYSQL_DSN")
	if base == "" {
		base = "root@tcp(127.0.0.1:3306)/"
	}
	ctx := context.Background()
	db, err := mysql.Connect(ctx, base, mysql.Options{MaxConns: 1})
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("MySQL/MariaDB is needed (TEST_POSTINO_MYSQL_DSN): %v", err)
		}
		t.Skipf("no MySQL/MariaDB: %v", err)
	}
	name := fmt.Sprintf("postino_relay_%d", time.Now().UnixNano())
	_, err = db.Exec("CREATE DATABASE " + name)
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if db, err := mysql.Connect(ctx, base, mysql.Options{MaxConns: 1}); err == nil {
			db.Exec("DROP DATABASE " + name)
			db.Close()
		}
	})
	db, err = mysql.Connect(ctx, base+name, mysql.Options{MaxConns: 2}) // Migrate holds one connection and reads with another
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	return base + name
}

// fleetConfig is one relay of a fleet on the MySQL outbox dsn, with the
// data directory dir and the spool store given.
func fleetConfig(t *testing.T, dsn, host, dir, store string) (relay.Config, func() string) {
	cfg, up := testConfig(t)
	cfg.Outbox.Backend = "mysql"
	cfg.Outbox.MySQL.DSN = dsn
	cfg.Hostname = host
	cfg.DataDir = dir
	cfg.Spool.Store = store
	return cfg, func() string { return up.Addr }
}

// spoolFiles lists the message files under a data directory.
func spoolFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".eml") {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// dynamodbOutbox makes a table on DynamoDB Local for one test, deleted at
// its end, and returns a function that points a relay's outbox at it.
func dynamodbOutbox(t *testing.T) func(*relay.Config) {
	t.Helper()
	endpoint := os.Getenv("TEST_POSTINO_DYNAMODB_ENDPOINT")
	if endpoint == "" {
		endpoint = "http://127.0.0.1:8000"
	}
	u, _ := url.Parse(endpoint)
	if c, err := net.DialTimeout("tcp", u.Host, time.Second); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("DynamoDB Local is needed (TEST_POSTINO_DYNAMODB_ENDPOINT): %v", err)
		}
		t.Skipf("no DynamoDB Local at %s: %v", endpoint, err)
	} else {
		c.Close()
	}
	// DynamoDB Local takes any credentials, but the SDK wants some.
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "postino", "AWS_SECRET_ACCESS_KEY": "postino", "AWS_REGION": "us-east-1"} {
		if os.Getenv(k) == "" {
			t.Setenv(k, v)
		}
	}
	opts := dynamodb.Options{Table: fmt.Sprintf("relay_%d_%d", os.Getpid(), time.Now().UnixNano()), Endpoint: endpoint}
	ctx := context.Background()
	if _, _, err := dynamodb.CreateTable(ctx, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// CreateTable returned with every index ACTIVE: deleting is safe.
		if client, table, err := dynamodb.Client(ctx, opts); err == nil {
			client.DeleteTable(ctx, &awsdynamodb.DeleteTableInput{TableName: aws.String(table)})
		}
	})
	return func(c *relay.Config) {
		c.Outbox.Backend, c.Outbox.DynamoDB.Table, c.Outbox.DynamoDB.Endpoint = "dynamodb", opts.Table, endpoint
	}
}

// TestSpoolStoreOutbox: with spool.store outbox the relays share nothing
// but the store. Messages accepted by relay A, held in a suspended batch,
// are delivered by relay B, which has its own empty data directory and
// starts after A's is gone: their bytes, one of several chunks, came from
// the outbox.
func TestSpoolStoreOutbox(t *testing.T) {
	for name, outbox := range sharedOutboxes() {
		t.Run(name, func(t *testing.T) { testSpoolStoreOutbox(t, outbox(t)) })
	}
}

// sharedOutboxes are the stores relays may share, each making an outbox
// for one test and returning what points a relay's configuration at it.
func sharedOutboxes() map[string]func(t *testing.T) func(*relay.Config) {
	return map[string]func(t *testing.T) func(*relay.Config){
		"mysql": func(t *testing.T) func(*relay.Config) {
			dsn := mysqlOutbox(t)
			return func(c *relay.Config) { c.Outbox.Backend, c.Outbox.MySQL.DSN = "mysql", dsn }
		},
		"postgres": func(t *testing.T) func(*relay.Config) {
			dsn := pgtest.Migrated(t)
			return func(c *relay.Config) { c.Outbox.Backend, c.Outbox.Postgres.DSN = "postgres", dsn }
		},
		"dynamodb": dynamodbOutbox,
	}
}

func testSpoolStoreOutbox(t *testing.T, outbox func(*relay.Config)) {
	cfgA, _ := testConfig(t)
	outbox(&cfgA)
	cfgA.Hostname, cfgA.Spool.Store = "relay-a", relay.SpoolOutbox
	a := start(t, cfgA)
	ctx := context.Background()
	if err := a.client.SuspendBatch(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	bodies := map[string]string{
		"small": "hello from relay A\r\n",
		// Larger than a chunk of email_bodies (1 MiB) and than what a
		// DynamoDB create's transaction carries (3 MiB): read back from
		// several rows or items.
		"large": strings.Repeat("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\r\n", 60000),
	}
	ids := map[string]string{}
	for name, body := range bodies {
		ids[name] = sendTo(t, a.r.SMTPAddr().String(), []string{"user@example.net"}, "X-Postino-Batch: held\r\n", body)
	}
	for name, id := range ids {
		m := waitStatus(t, a.client, id, "READY")
		if !strings.HasPrefix(m.EmlPath, "outbox:") {
			t.Errorf("%s: eml path %q, want the outbox's", name, m.EmlPath)
		}
	}
	if files := spoolFiles(t, cfgA.DataDir); len(files) != 0 {
		t.Errorf("relay A wrote message files: %v", files)
	}
	a.stop()
	if err := os.RemoveAll(cfgA.DataDir); err != nil {
		t.Fatal(err)
	}

	cfgB, up := testConfig(t)
	outbox(&cfgB)
	cfgB.Hostname, cfgB.Spool.Store = "relay-b", relay.SpoolOutbox
	b := start(t, cfgB)
	if err := b.client.ActivateBatch(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		waitStatus(t, b.client, id, "SENT-ACKNOWLEDGED")
	}
	got := map[string][]byte{}
	for _, m := range up.Messages() {
		got[m.Header("X-Genro-Mail-ID")] = m.Data
	}
	for name, id := range ids {
		if _, body, _ := bytes.Cut(got[id], []byte("\r\n\r\n")); string(body) != bodies[name] {
			t.Errorf("%s: upstream got a body of %d bytes, want %d", name, len(body), len(bodies[name]))
		}
	}
	if n := len(up.Messages()); n != len(ids) {
		t.Errorf("upstream got %d messages, want %d", n, len(ids))
	}
	if files := spoolFiles(t, cfgB.DataDir); len(files) != 0 {
		t.Errorf("relay B wrote message files: %v", files)
	}
}

// TestSpoolStoreSharedToOutbox moves a fleet from a shared directory to
// the outbox without stopping it: a relay restarted with spool.store
// outbox writes new messages to the store and still reads the old ones
// from the directory, as each row's path says.
func TestSpoolStoreSharedToOutbox(t *testing.T) {
	dsn := mysqlOutbox(t)
	shared := t.TempDir()
	cfgA, _ := fleetConfig(t, dsn, "relay-a", shared, relay.SpoolShared)
	a := start(t, cfgA)
	ctx := context.Background()
	if err := a.client.SuspendBatch(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	old := sendTo(t, a.r.SMTPAddr().String(), []string{"user@example.net"}, "X-Postino-Batch: held\r\n", "written to the shared directory\r\n")
	if m := waitStatus(t, a.client, old, "READY"); strings.HasPrefix(m.EmlPath, "outbox:") || len(spoolFiles(t, shared)) != 1 {
		t.Fatalf("a shared relay recorded %q", m.EmlPath)
	}
	a.stop()

	cfgB, up := testConfig(t)
	cfgB.Outbox.Backend, cfgB.Outbox.MySQL.DSN, cfgB.Hostname, cfgB.Spool.Store, cfgB.DataDir = "mysql", dsn, "relay-a", relay.SpoolOutbox, shared
	b := start(t, cfgB)
	fresh := sendTo(t, b.r.SMTPAddr().String(), []string{"user@example.net"}, "X-Postino-Batch: held\r\n", "written to the outbox\r\n")
	if err := b.client.ActivateBatch(ctx, "held"); err != nil {
		t.Fatal(err)
	}
	if m := waitStatus(t, b.client, fresh, "SENT-ACKNOWLEDGED"); !strings.HasPrefix(m.EmlPath, "outbox:") {
		t.Errorf("after the restart, a new message went to %q", m.EmlPath)
	}
	if m := waitStatus(t, b.client, old, "SENT-ACKNOWLEDGED"); m.EmlPath == "" || strings.HasPrefix(m.EmlPath, "outbox:") {
		t.Errorf("the old message's path became %q", m.EmlPath)
	}
	if n := len(up.Messages()); n != 2 {
		t.Errorf("upstream got %d messages, want 2", n)
	}
	if n := len(spoolFiles(t, shared)); n != 1 {
		t.Errorf("%d files in the shared directory, want the old message's only", n)
	}
}

// outboxStores are the stores that keep messages' bytes, each with a
// count of the receipt rows or items it keeps for a message.
var outboxStores = map[string]struct {
	outbox   func(t *testing.T) func(*relay.Config)
	receipts func(t *testing.T, c relay.Config, id string) int
}{
	"mysql": {
		outbox: func(t *testing.T) func(*relay.Config) {
			dsn := mysqlOutbox(t)
			return func(c *relay.Config) { c.Outbox.Backend, c.Outbox.MySQL.DSN = "mysql", dsn }
		},
		receipts: func(t *testing.T, c relay.Config, id string) int {
			db, err := mysql.Connect(context.Background(), c.Outbox.MySQL.DSN, mysql.Options{MaxConns: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			n := 0
			if err := db.QueryRow("SELECT COUNT(*) FROM email_receipts WHERE email_id = ?", id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
	},
	"postgres": {
		outbox: func(t *testing.T) func(*relay.Config) {
			dsn := pgtest.Migrated(t)
			return func(c *relay.Config) { c.Outbox.Backend, c.Outbox.Postgres.DSN = "postgres", dsn }
		},
		receipts: func(t *testing.T, c relay.Config, id string) int {
			ctx := context.Background()
			pool, err := postgres.Connect(ctx, c.Outbox.Postgres.DSN, postgres.Options{MaxConns: 1})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			n := 0
			if err := pool.QueryRow(ctx, "SELECT COUNT(*) FROM email_receipts WHERE email_id = $1", id).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
	},
	"dynamodb": {
		outbox: dynamodbOutbox,
		receipts: func(t *testing.T, c relay.Config, id string) int {
			ctx := context.Background()
			client, table, err := dynamodb.Client(ctx, dynamodb.Options{Table: c.Outbox.DynamoDB.Table, Endpoint: c.Outbox.DynamoDB.Endpoint})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Query(ctx, &awsdynamodb.QueryInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true),
				KeyConditionExpression:    aws.String("Id = :id AND begins_with(#s, :p)"),
				ExpressionAttributeNames:  map[string]string{"#s": "Status"},
				ExpressionAttributeValues: map[string]types.AttributeValue{":id": &types.AttributeValueMemberS{Value: id}, ":p": &types.AttributeValueMemberS{Value: "_RECEIPT#"}},
				Select:                    types.SelectCount})
			if err != nil {
				t.Fatal(err)
			}
			return int(resp.Count)
		},
	},
}

// TestSpoolStoreOutboxReceipts: with spool.store outbox, the receipts of a
// PEC message are kept in the store with its bytes, once however many
// times they are read. Relay B, whose data directory is its own and
// empty, lists and serves them after relay A is gone; retention removes
// them with the message.
func TestSpoolStoreOutboxReceipts(t *testing.T) {
	for name, store := range outboxStores {
		t.Run(name, func(t *testing.T) {
			outbox := store.outbox(t)
			s := newPECSetup(t)
			outbox(&s.cfg)
			s.cfg.Hostname, s.cfg.Spool.Store = "relay-a", relay.SpoolOutbox
			a := start(t, s.cfg)
			// Larger than a row of email_receipts and an item of DynamoDB:
			// a complete delivery receipt carries the message.
			body := strings.Repeat("Contratto n. 42, pagina dopo pagina.\r\n", 40000)
			id := sendRaw(t, a.r.SMTPAddr().String(), pecAccount, []string{"anna@pec.dest.it"},
				fmt.Appendf(nil, "From: %s\r\nTo: anna@pec.dest.it\r\nSubject: Contratto n. 42\r\n\r\n%s", pecAccount, body))
			waitStatus(t, a.client, id, "SENT-ACKNOWLEDGED")
			delivered := receivedByUpstream(t, s.provider, id)
			want := map[pec.Type][]byte{}
			for _, typ := range []pec.Type{pec.Accettazione, pec.AvvenutaConsegna} {
				want[typ] = s.ca.Receipt(t, pectest.ReceiptOptions{Type: typ, Original: delivered.Data})
				s.box.Append(t, "INBOX", want[typ])
			}
			s.box.Append(t, "INBOX", want[pec.AvvenutaConsegna]) // read again: kept once
			waitCount(t, memBox{s.box}, "Processed", 3)
			waitStatus(t, a.client, id, "PEC-DELIVERED-ACKNOWLEDGED")
			if files := spoolFiles(t, s.cfg.DataDir); len(files) != 0 {
				t.Errorf("relay A wrote receipts on its disk: %v", files)
			}
			if n := store.receipts(t, s.cfg, id); n < 3 {
				t.Errorf("the store keeps %d receipt chunks, want the receipts in several", n)
			}
			a.stop()
			if err := os.RemoveAll(s.cfg.DataDir); err != nil {
				t.Fatal(err)
			}

			cfgB, _ := testConfig(t)
			outbox(&cfgB)
			cfgB.Hostname, cfgB.Spool.Store = "relay-b", relay.SpoolOutbox
			b := start(t, cfgB)
			ctx := context.Background()
			list, err := b.client.Receipts(ctx, id)
			if err != nil || len(list.Receipts) != len(want) {
				t.Fatalf("relay B lists %+v, %v", list, err)
			}
			for _, r := range list.Receipts {
				raw, err := b.client.Receipt(ctx, id, r.Name)
				if err != nil {
					t.Fatal(err)
				}
				typ := pec.Accettazione
				if strings.HasPrefix(r.Name, string(pec.AvvenutaConsegna)) {
					typ = pec.AvvenutaConsegna
				}
				if !bytes.Equal(raw, want[typ]) || r.Size != int64(len(raw)) {
					t.Errorf("relay B serves %s as %d bytes (listed %d), want the %d that came", r.Name, len(raw), r.Size, len(want[typ]))
				}
			}
			b.stop()

			// The message goes first, then what it kept: wait for both.
			cfgB.Retention = relay.Duration(time.Millisecond)
			b = start(t, cfgB)
			deadline := time.Now().Add(60 * time.Second)
			for {
				_, err := b.client.Get(ctx, id)
				n := store.receipts(t, cfgB, id)
				if admin.IsNotFound(err) && n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("retention left %s (%v) and %d of its receipt chunks", id, err, n)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}
