package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/backends/mysql"
	"github.com/genropy/postino/internal/testrig/dkimtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay/admin"
	"github.com/genropy/postino/relay/dkim"
)

// emptyDatabase makes a MySQL database for one test and drops it at the
// end; it returns its DSN.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	base := os.Getenv("TEST_POSTINO_MYSQL_DSN")
	if base == "" {
		base = "root@tcp(127.0.0.1:3306)/"
	}
	db, err := mysql.Connect(context.Background(), base, mysql.Options{MaxConns: 1})
	if err != nil {
		serviceMissing(t, "MySQL/MariaDB", err)
	}
	name := fmt.Sprintf("postino_test_%d", time.Now().UnixNano())
	if _, err := db.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	db.Close()
	t.Cleanup(func() {
		if db, err := sql.Open("mysql", base); err == nil {
			db.Exec("DROP DATABASE " + name)
			db.Close()
		}
	})
	return base + name
}

// migratedDatabase is an emptyDatabase with the outbox schema.
func migratedDatabase(t *testing.T) string {
	t.Helper()
	dsn := emptyDatabase(t)
	if _, errOut, code := cli(t, "migrate", "--backend", "mysql", "--dsn", dsn); code != 0 {
		t.Fatalf("migrate: %s", errOut)
	}
	return dsn
}

// testPlugin is the relay's test plugin, built for one test: it appends
// the events it gets to Out and keeps its state in State.
type testPlugin struct {
	Path, Out, State string
}

func buildTestPlugin(t *testing.T) testPlugin {
	t.Helper()
	dir := t.TempDir()
	p := testPlugin{Path: filepath.Join(dir, "testplugin"), Out: filepath.Join(dir, "events.jsonl"), State: filepath.Join(dir, "state")}
	if out, err := exec.Command("go", "build", "-o", p.Path, "../../plugins/testdata/testplugin").CombinedOutput(); err != nil {
		t.Fatalf("build the test plugin: %v\n%s", err, out)
	}
	if err := os.Mkdir(p.State, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEnvironmentOnly starts postino serve with nothing but POSTINO_*
// variables, as a container would, and follows a message through it: the
// MySQL outbox, the smarthost, the DKIM key and a plugin.
func TestEnvironmentOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a relay process")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	plugin := buildTestPlugin(t)
	key, err := dkim.GenerateKey("ed25519", 0)
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(dir, "s1.key")
	if err := dkim.WriteKey(keyFile, key); err != nil {
		t.Fatal(err)
	}
	record, _ := dkim.Record(key)
	tokenFile := filepath.Join(dir, "admin-token")
	os.WriteFile(tokenFile, []byte("t0ken\n"), 0o600)
	up := smtptest.Start(t, smtptest.Options{})
	smtpAddr, adminAddr := freeAddr(t), freeAddr(t)
	plugins, _ := json.Marshal([]map[string]any{{"path": plugin.Path, "name": "app", "env": map[string]string{
		"TESTPLUGIN_MODE": "ok", "TESTPLUGIN_OUT": plugin.Out, "TESTPLUGIN_STATE": plugin.State}}})
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"POSTINO_DATA=" + filepath.Join(dir, "data"),
		"POSTINO_LISTEN=" + smtpAddr,
		"POSTINO_ADMIN=" + adminAddr,
		"POSTINO_ADMIN_TOKEN_FILE=" + tokenFile,
		"POSTINO_SMARTHOST=" + up.Addr,
		"POSTINO_BACKEND=mysql",
		"POSTINO_OUTBOX_MYSQL_DSN=" + migratedDatabase(t),
		`POSTINO_DKIM_KEYS=[{"domain": "example.com", "selector": "s1", "key_file": "` + keyFile + `"}]`,
		"POSTINO_PLUGINS=" + string(plugins),
		"POSTINO_DELIVERY_POLL=100ms",
		"POSTINO_HOSTNAME=sidecar.test",
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = env
	logPath := filepath.Join(dir, "serve.log")
	logf, _ := os.Create(logPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	dieWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); logf.Close() })
	fail := func(format string, args ...any) {
		t.Helper()
		log, _ := os.ReadFile(logPath)
		t.Fatalf(format+"\nrelay log:\n%s", append(args, log)...)
	}
	c := &admin.Client{Base: adminAddr, Token: "t0ken"}
	ctx := context.Background()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if st, err := c.Ready(ctx); err == nil && st.Status == "ready" {
			break
		}
		if time.Now().After(deadline) {
			fail("the relay did not become ready")
		}
	}
	s, err := smtp.Dial(smtpAddr)
	if err != nil {
		t.Fatal(err)
	}
	err = s.SendMail("app@example.com", []string{"user@example.net"},
		strings.NewReader("From: app@example.com\r\nTo: user@example.net\r\nX-Genro-Mail-ID: env-1\r\nSubject: env only\r\n\r\nbody\r\n"))
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	var m admin.Message
	for deadline := time.Now().Add(20 * time.Second); m.Status != "SENT-ACKNOWLEDGED"; time.Sleep(50 * time.Millisecond) {
		if m, err = c.Get(ctx, "env-1"); err != nil && !strings.Contains(err.Error(), "not found") {
			fail("%v", err)
		}
		if time.Now().After(deadline) {
			fail("env-1 is %s", m.Status)
		}
	}
	if len(m.Events) != 1 || fmt.Sprint(m.Events[0].Acked) != "[app]" {
		t.Errorf("events %+v: the plugin did not acknowledge", m.Events)
	}
	if got := readEvents(t, plugin.Out); len(got) != 1 || got[0]["outcome"] != "SENT" {
		t.Errorf("the plugin got %v", got)
	}
	msgs := up.Messages()
	if len(msgs) != 1 {
		t.Fatalf("the smarthost got %d messages", len(msgs))
	}
	verdicts := dkimtest.Verify(t, msgs[0].Data, dkimtest.Records{dkim.RecordName("example.com", "s1"): record})
	if len(verdicts) != 1 || verdicts[0] != "d=example.com" {
		t.Errorf("DKIM verdicts %v", verdicts)
	}
	// The admin API asks for the token; the CLI finds it where the relay
	// does.
	if _, errOut, code := cli(t, "queue", "show", "env-1", "--admin", adminAddr); code != 1 || !strings.Contains(errOut, "token") {
		t.Errorf("queue show without the token: exit %d: %s", code, errOut)
	}
	// From the relay's configuration file, and from the environment.
	conf := filepath.Join(dir, "postino.yaml")
	os.WriteFile(conf, []byte("admin:\n  listen: "+adminAddr+"\n  token_file: "+tokenFile+"\n"), 0o644)
	t.Setenv("POSTINO_CONFIG", conf)
	if out, errOut, code := cli(t, "queue", "show", "env-1", "--admin", adminAddr); code != 0 || !strings.Contains(out, "SENT-ACKNOWLEDGED") {
		t.Errorf("queue show with the token in POSTINO_CONFIG: exit %d: %s%s", code, out, errOut)
	}
	// The address too, with no --admin: the token and the address of one
	// relay, never one relay's token sent to another's address.
	if out, errOut, code := cli(t, "queue", "show", "env-1"); code != 0 || !strings.Contains(out, "SENT-ACKNOWLEDGED") {
		t.Errorf("queue show with the address in POSTINO_CONFIG: exit %d: %s%s", code, out, errOut)
	}
	t.Setenv("POSTINO_CONFIG", "")
	t.Setenv("POSTINO_ADMIN_TOKEN_FILE", tokenFile)
	if out, errOut, code := cli(t, "queue", "show", "env-1", "--admin", adminAddr); code != 0 || !strings.Contains(out, "SENT-ACKNOWLEDGED") {
		t.Errorf("queue show with the token: exit %d: %s%s", code, out, errOut)
	}
}

func TestConfigPrint(t *testing.T) {
	t.Setenv("POSTINO_SMARTHOST", "mail.example.com:587")
	t.Setenv("POSTINO_BACKEND", "mysql")
	t.Setenv("POSTINO_OUTBOX_MYSQL_DSN", "postino:hunter2@tcp(db:3306)/postino")
	t.Setenv("POSTINO_SUBMISSIONS", `[{"driver": "postgres", "dsn": "postgres://app:t0ps3cret@db/app"}, {"driver": "postgres", "name": "crm", "dsn": "host=db password='s3 cr3t' dbname=app"}, {"driver": "mysql", "dsn": "app:m1sql@tcp(db:3306)/app"}]`)
	t.Setenv("POSTINO_PLUGINS", `[{"path": "/usr/lib/postino/webhook", "args": ["--relay=https://hook:p4ss@relay.example/in"], "env": {"POSTINO_WEBHOOK_URL": "https://app/hook", "POSTINO_WEBHOOK_SECRET": "s3cr3t", "POSTINO_FORWARD": "https://user:pw0rd@app/forward"}}]`)
	out, errOut, code := cli(t, "config", "print")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"smarthost: mail.example.com:587", "backend: mysql", "dsn: postino:*****@tcp(db:3306)/postino",
		"POSTINO_WEBHOOK_SECRET: '*****'", "POSTINO_WEBHOOK_URL: https://app/hook", "POSTINO_FORWARD: https://user:*****@app/forward", "retention: 168h0m0s", "listen: 127.0.0.1:2525",
		"dsn: postgres://app:*****@db/app", "dsn: host=db password=***** dbname=app", "dsn: app:*****@tcp(db:3306)/app"} {
		if !strings.Contains(out, want) {
			t.Errorf("config print lacks %q:\n%s", want, out)
		}
	}
	for _, secret := range []string{"hunter2", "s3cr3t", "pw0rd", "p4ss", "t0ps3cret", "m1sql"} {
		if strings.Contains(out, secret) {
			t.Errorf("config print shows the secret %q", secret)
		}
	}

	for _, tt := range []struct {
		env, file, want string
	}{
		{env: "POSTINO_SMARTHOTS=x:25", want: "POSTINO_SMARTHOTS is not a setting; did you mean POSTINO_SMARTHOST?"},
		{file: "delivery:\n  max_in_fligth: 3\n", want: "max_in_fligth is not a setting; did you mean max_in_flight?"},
		{env: "POSTINO_ADMIN=0.0.0.0:8525", want: "admin.token_file"},
	} {
		args := []string{"config", "print"}
		if tt.env != "" {
			k, v, _ := strings.Cut(tt.env, "=")
			t.Setenv(k, v)
		}
		if tt.file != "" {
			f := filepath.Join(t.TempDir(), "postino.yaml")
			os.WriteFile(f, []byte(tt.file), 0o644)
			args = append(args, "--config", f)
		}
		_, errOut, code := cli(t, args...)
		if code != 1 || !strings.Contains(errOut, tt.want) {
			t.Errorf("%s%s: exit %d: %s", tt.env, tt.file, code, errOut)
		}
		if tt.env != "" {
			k, _, _ := strings.Cut(tt.env, "=")
			os.Unsetenv(k)
		}
	}
}

func TestHealth(t *testing.T) {
	r := startRelay(t)
	out, errOut, code := cli(t, "health", "--admin", r.AdminAddr().String())
	if code != 0 || strings.TrimSpace(out) != "ready" {
		t.Errorf("health: exit %d: %s%s", code, out, errOut)
	}
	// A probe whose environment cannot give the token still gets the status:
	// /readyz needs none.
	t.Setenv("POSTINO_ADMIN_TOKEN_ENV", "POSTINO_TEST_NO_SUCH_TOKEN")
	out, errOut, code = cli(t, "health", "--admin", r.AdminAddr().String())
	if code != 0 || strings.TrimSpace(out) != "ready" {
		t.Errorf("health with an unreadable token: exit %d: %s%s", code, out, errOut)
	}
	if _, errOut, code := cli(t, "health", "--admin", freeAddr(t)); code != 1 || !strings.Contains(errOut, "cannot reach") {
		t.Errorf("health of no relay: exit %d: %s", code, errOut)
	}
}
