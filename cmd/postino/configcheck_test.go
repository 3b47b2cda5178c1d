package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestConfigCheckAsServe: configurations that serve refuses, beyond what
// Check sees, are refused by config check and config print with the same
// messages.
func TestConfigCheckAsServe(t *testing.T) {
	dir := t.TempDir()
	world := filepath.Join(dir, "world.pem")
	os.WriteFile(world, []byte("-----BEGIN PRIVATE KEY-----\n-----END PRIVATE KEY-----\n"), 0o644)
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name, file string
		env        map[string]string
		want       []string // the lines of the message
	}{
		{name: "route AUTH in clear", file: "routes:\n  default:\n    smarthost: mail.example.com:587\n    username: app\n    password_env: TEST_POSTINO_PW\n",
			env:  map[string]string{"TEST_POSTINO_PW": "pw"},
			want: []string{"routes: route default: AUTH to mail.example.com:587 with tls none would send the password in clear"}},
		{name: "route password unset", file: "routes:\n  default:\n    smarthost: mail.example.com:587\n    tls: starttls\n    username: app\n    password_env: TEST_POSTINO_UNSET\n",
			want: []string{"route default: password of app: environment variable TEST_POSTINO_UNSET is empty or unset"}},
		{name: "route password file missing", file: "routes:\n  default:\n    smarthost: mail.example.com:465\n    tls: tls\n    username: app\n    password_file: " + missing + "\n",
			want: []string{"route default: password of app: read secret: open " + missing}},
		{name: "route CA file missing", file: "routes:\n  default:\n    smarthost: mail.example.com:587\n    tls: starttls\n    tls_ca_file: " + missing + "\n",
			want: []string{"routes: route default: open " + missing}},
		{name: "route TLS unknown", file: "routes:\n  default:\n    smarthost: mail.example.com:587\n    tls: ssl\n",
			want: []string{`routes: route default: tls "ssl": use none, opportunistic, starttls or tls`}},
		{name: "MX delivery with starttls", file: "routes:\n  default:\n    tls: starttls\n",
			want: []string{"routes: route default: tls starttls applies to a smarthost"}},
		{name: "smarthost without port", file: "routes:\n  default:\n    smarthost: mail.example.com\n",
			want: []string{`routes: route default: smarthost "mail.example.com" is not host:port`}},
		{name: "bounce address", file: "routes:\n  default:\n    bounce_address: bounces\n",
			want: []string{`routes: route default: bounce address "bounces" is not an address`}},
		{name: "sender route matching nothing", file: "routes:\n  senders:\n    - smarthost: b.example.com:25\n",
			want: []string{"routes: rule 1 matches nothing"}},
		{name: "sender routes named alike", file: "routes:\n  senders:\n    - {name: b, match: {domain: b.example}, smarthost: b.example:25}\n    - {name: b, match: {domain: c.example}, smarthost: c.example:25}\n",
			want: []string{"routes: two routes are named b"}},
		{name: "AUTH account password unset", file: "smtp:\n  auth:\n    allow_insecure: true\n    accounts:\n      - {username: app, password_env: TEST_POSTINO_UNSET}\n",
			want: []string{`smtp.auth account "app": environment variable TEST_POSTINO_UNSET is empty or unset`}},
		{name: "SMTP key pair missing", file: "smtp:\n  tls:\n    cert_file: " + missing + "\n    key_file: " + missing + "\n",
			want: []string{"smtp.tls: open " + missing}},
		{name: "admin token file missing", file: "admin:\n  token_file: " + missing + "\n",
			want: []string{"admin token: read secret: open " + missing}},
		{name: "admin token variable unset", file: "admin:\n  token_env: TEST_POSTINO_UNSET\n",
			want: []string{"admin token: environment variable TEST_POSTINO_UNSET is empty or unset"}},
		{name: "DKIM key missing", file: "dkim:\n  keys:\n    - {domain: example.com, selector: s1, key_file: " + missing + "}\n",
			want: []string{"DKIM key " + missing + ": stat " + missing}},
		{name: "DKIM key readable by all", file: "dkim:\n  keys:\n    - {domain: example.com, selector: s1, key_file: " + world + "}\n",
			want: []string{"DKIM key " + world + " is readable or writable by every user"}},
		{name: "DKIM canonicalization", file: "dkim:\n  canonicalization: loose\n",
			want: []string{`dkim.canonicalization "loose": use relaxed/relaxed`}},
		{name: "DKIM headers without From", file: "dkim:\n  headers: [Subject]\n",
			want: []string{"dkim.headers must include From"}},
		{name: "bounce mailbox password unset", file: "bounces:\n  mailboxes:\n    - {host: imap.example.com, username: b, password_env: TEST_POSTINO_UNSET}\n",
			want: []string{"bounces.mailboxes[0]: mailbox b@imap.example.com: password: environment variable TEST_POSTINO_UNSET is empty or unset"}},
		{name: "bounce mailbox in clear", file: "bounces:\n  mailboxes:\n    - {host: imap.example.com, tls: none, username: b, password_env: TEST_POSTINO_PW}\n",
			env:  map[string]string{"TEST_POSTINO_PW": "pw"},
			want: []string{"bounces.mailboxes[0]: mailbox imap.example.com: tls none is for loopback only"}},
		{name: "PEC trust bundle missing", file: "pec:\n  trust_bundle: " + missing + "\n  accounts:\n    - {address: a@pec.example.it, password_env: TEST_POSTINO_PW, smtp: smtps.pec.example.it:465, imap: imaps.pec.example.it:993}\n",
			env:  map[string]string{"TEST_POSTINO_PW": "pw"},
			want: []string{"pec.trust_bundle: pec: trust bundle: open " + missing}},
		{name: "PEC password unset", file: "pec:\n  accounts:\n    - {address: a@pec.example.it, password_env: TEST_POSTINO_UNSET, smtp: smtps.pec.example.it:465, imap: imaps.pec.example.it:993}\n",
			want: []string{"route pec:a@pec.example.it: password of a@pec.example.it: environment variable TEST_POSTINO_UNSET is empty or unset",
				"pec.accounts[0]: mailbox pec a@pec.example.it: password: environment variable TEST_POSTINO_UNSET is empty or unset"}},
		{name: "MySQL DSN variable unset", file: "outbox:\n  backend: mysql\n  mysql:\n    dsn_env: TEST_POSTINO_UNSET\n",
			want: []string{"outbox.mysql DSN: environment variable TEST_POSTINO_UNSET is empty or unset"}},
		{name: "MySQL DSN unreadable", file: "outbox:\n  backend: mysql\n  mysql:\n    dsn: postino@db\n",
			want: []string{"MySQL DSN: invalid DSN: missing the slash"}},
		{name: "MySQL CA file missing", file: "outbox:\n  backend: mysql\n  mysql:\n    dsn: postino@tcp(db:3306)/postino\n    tls_ca_file: " + missing + "\n",
			want: []string{"MySQL TLS: open " + missing}},
		{name: "PostgreSQL DSN unreadable", file: "outbox:\n  backend: postgres\n  postgres:\n    dsn: postgres://db:port/x\n",
			want: []string{"PostgreSQL DSN: cannot parse `postgres://db:port/x`: invalid port"}},
		{name: "DynamoDB without a table", file: "outbox:\n  backend: dynamodb\n",
			env:  map[string]string{"EMAIL_OUTBOX_TABLE": ""},
			want: []string{"outbox.dynamodb.table is empty"}},
		{name: "submissions DSN file missing", file: "submissions:\n  - {driver: postgres, dsn_file: " + missing + "}\n",
			want: []string{"submissions[0] DSN: read secret: open " + missing}},
		{name: "log level", file: "log:\n  level: loud\n", want: []string{`log.level "loud": use debug, info, warn or error`}},
		{name: "several at once", file: "admin:\n  token_env: TEST_POSTINO_UNSET\n" +
			"routes:\n  default:\n    smarthost: mail.example.com:587\n    tls: ssl\n",
			want: []string{"admin token: environment variable TEST_POSTINO_UNSET is empty or unset", `routes: route default: tls "ssl"`}},
	}
	t.Setenv("POSTINO_CONFIG", "")
	t.Setenv("POSTINO_DATA", filepath.Join(dir, "data"))
	t.Setenv("POSTINO_LISTEN", "127.0.0.1:0")
	t.Setenv("POSTINO_ADMIN", "127.0.0.1:0")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			file := filepath.Join(t.TempDir(), "postino.yaml")
			if err := os.WriteFile(file, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			// A serve that starts after all is stopped, and fails the test.
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out, serveErr bytes.Buffer
			if code := run(ctx, []string{"serve", "--config", file}, &out, &serveErr); code != 1 {
				t.Fatalf("serve: exit %d: %s", code, serveErr.String())
			}
			lines := strings.Split(strings.TrimSuffix(strings.TrimPrefix(serveErr.String(), "postino: "), "\n"), "\n")
			if len(lines) != len(tt.want) {
				t.Fatalf("serve says\n%s\nwant %d lines", serveErr.String(), len(tt.want))
			}
			for i, want := range tt.want {
				if !strings.Contains(lines[i], want) {
					t.Errorf("serve says\n%s\nwant\n%s", lines[i], want)
				}
			}
			for _, cmd := range [][]string{{"config", "check"}, {"config", "print"}} {
				out, errOut, code := cli(t, append(cmd, "--config", file)...)
				if code != 1 || out != "" || errOut != serveErr.String() {
					t.Errorf("%s: exit %d, %d bytes on stdout, says\n%s\nwhere serve says\n%s", strings.Join(cmd, " "), code, len(out), errOut, serveErr.String())
				}
			}
		})
	}
}

func TestConfigCheckOK(t *testing.T) {
	t.Setenv("POSTINO_CONFIG", "")
	out, errOut, code := cli(t, "config", "check")
	if code != 0 || errOut != "" || out != "ok: serve would start with this configuration, as far as can be told without reaching the network\n" {
		t.Errorf("exit %d: %q %q", code, out, errOut)
	}
}
