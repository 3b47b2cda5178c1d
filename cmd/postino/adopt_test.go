package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends/mysql"
	"github.com/genropy/postino/internal/smtptest"
	"github.com/genropy/postino/relay/admin"
)

// TestAdoptSeedOutbox takes over, in place, a MariaDB outbox as the seed's
// relay leaves it: a READY row whose message and JSON payload sit at
// absolute paths on the old shared volume is delivered to the recipients
// its payload names, and reported; one naming no message file is reported
// INVALID with what to do.
func TestAdoptSeedOutbox(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a relay process")
	}
	ctx := context.Background()
	dsn := emptyDatabase(t)
	volume := t.TempDir() // the seed's shared volume
	eml := filepath.Join(volume, "legacy-ready.eml")
	payload := filepath.Join(volume, "legacy-ready.json")
	if err := os.WriteFile(eml, []byte("From: App <app@example.com>\r\nTo: shown@example.net\r\nSubject: from the old relay\r\n\r\nhello\r\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(payload, []byte(`{"from": "app@example.com", "to": ["one@example.net", "two@example.net"]}`), 0o640); err != nil {
		t.Fatal(err)
	}
	db, err := mysql.Connect(ctx, dsn, mysql.Options{MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{
		`CREATE TABLE emails (id CHAR(36) PRIMARY KEY, status ENUM('ACCEPTED','INTAKING','READY','PROCESSING','SENT','FAILED','INVALID',
			'CALLING-SENT-CALLBACK','CALLING-FAILED-CALLBACK','SENT-ACKNOWLEDGED','FAILED-ACKNOWLEDGED') NOT NULL,
			eml_file_path VARCHAR(500), payload_file_path VARCHAR(500), reason TEXT, version INT NOT NULL DEFAULT 1,
			created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, updated_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
			INDEX idx_status (status), INDEX idx_status_updated (status, updated_at)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		`CREATE TABLE email_statuses (id BIGINT AUTO_INCREMENT PRIMARY KEY, email_id CHAR(36) NOT NULL, status VARCHAR(50) NOT NULL,
			reason TEXT, created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP, INDEX idx_email_id (email_id),
			FOREIGN KEY (email_id) REFERENCES emails(id) ON DELETE CASCADE) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`,
		`INSERT INTO emails (id, status, eml_file_path, payload_file_path, reason) VALUES
			('legacy-ready', 'READY', '` + eml + `', '` + payload + `', 'queued by the old relay'),
			('legacy-lost', 'READY', NULL, NULL, ''),
			('legacy-done', 'SENT-ACKNOWLEDGED', '/efs/done.eml', NULL, '250 ok')`,
	} {
		if _, err := db.Exec(st); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	out, errOut, code := cli(t, "migrate", "--backend", "mysql", "--dsn", dsn)
	if code != 0 {
		t.Fatalf("migrate: %s", errOut)
	}
	for _, want := range []string{"READY                        2", "SENT-ACKNOWLEDGED            1", "taken over: 1 on their way",
		"could not: 1 name no message file"} {
		if !strings.Contains(out, want) {
			t.Errorf("migrate's report lacks %q:\n%s", want, out)
		}
	}

	up := smtptest.Start(t, smtptest.Options{})
	p := startProcess(t, buildBinary(t), t.TempDir(), []string{"--backend", "mysql", "--dsn", dsn, "--smarthost", up.Addr}, nil)
	c := &admin.Client{Base: p.admin}
	for id, want := range map[string]string{"legacy-ready": "SENT-ACKNOWLEDGED", "legacy-lost": "INVALID-ACKNOWLEDGED"} {
		deadline := time.Now().Add(60 * time.Second)
		for {
			m, err := c.Get(ctx, id)
			if err == nil && m.Status == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %+v, %v; want %s", id, m, err, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	msgs := up.Messages()
	if len(msgs) != 1 || msgs[0].From != "app@example.com" || !slices.Equal(msgs[0].To, []string{"one@example.net", "two@example.net"}) ||
		!strings.Contains(string(msgs[0].Data), "from the old relay") {
		t.Errorf("the upstream got %+v; want the old message once, to the payload's recipients", msgs)
	}
}
