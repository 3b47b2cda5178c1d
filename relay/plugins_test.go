package relay_test

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/genropy/postino/plugins/sdk"
	"github.com/genropy/postino/relay"
)

// builds holds the plugin binaries built once for this test run.
var builds struct {
	mu    sync.Mutex
	paths map[string]string
}

// build compiles a plugin of this module (package path) once.
func build(t *testing.T, pkg string) string {
	t.Helper()
	builds.mu.Lock()
	defer builds.mu.Unlock()
	if p, ok := builds.paths[pkg]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "postino-plugin")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, filepath.Base(pkg))
	if b, err := exec.Command("go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, b)
	}
	if builds.paths == nil {
		builds.paths = map[string]string{}
	}
	builds.paths[pkg] = out
	return out
}

// testPlugin configures the test plugin in a mode; it returns the file of
// the events it receives.
func testPlugin(t *testing.T, cfg *relay.Config, mode string, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	out := filepath.Join(dir, "events.jsonl")
	os.Mkdir(filepath.Join(dir, "state"), 0o755)
	env := map[string]string{"TESTPLUGIN_MODE": mode, "TESTPLUGIN_OUT": out, "TESTPLUGIN_STATE": filepath.Join(dir, "state")}
	for k, v := range extra {
		env[k] = v
	}
	p := relay.DefaultPlugin(build(t, "github.com/genropy/postino/plugins/testdata/testplugin"))
	p.Name = "test"
	p.Env = env
	p.Retry = relay.PluginRetryConfig{First: relay.Duration(50 * time.Millisecond), Max: relay.Duration(200 * time.Millisecond)}
	cfg.Plugins = append(cfg.Plugins, p)
	cfg.Delivery.Poll = relay.Duration(50 * time.Millisecond)
	return out
}

// received reads the events a test plugin got.
func received(t *testing.T, path string) []sdk.Event {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []sdk.Event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e sdk.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

// The dispatcher's own promises (retries, restarts, order, parking) are
// tested beside it, in plugins; these tests check that a relay runs its
// plugins and that its outcomes reach them.

func TestPluginEndToEnd(t *testing.T) {
	cfg, up := testConfig(t)
	out := testPlugin(t, &cfg, "ok", nil)
	pickyUpstream(up)
	rl := start(t, cfg)
	ok := sendTo(t, rl.r.SMTPAddr().String(), []string{"user@example.net"}, "X-Postino-Batch: b7\r\n", "x\r\n")
	bad := sendTo(t, rl.r.SMTPAddr().String(), []string{"nobody@example.net"}, "", "x\r\n")
	broken := sendTo(t, rl.r.SMTPAddr().String(), []string{"user@example.net"},
		"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=b1\r\n", "--b1\r\nContent-Type: text/plain\r\n\r\nnever closed\r\n")
	m := waitStatus(t, rl.client, ok, "SENT-ACKNOWLEDGED")
	if got := statuses(m); !strings.Contains(got, "SENT CALLING-SENT-CALLBACK SENT-ACKNOWLEDGED") {
		t.Errorf("history %s", got)
	}
	waitStatus(t, rl.client, bad, "FAILED-ACKNOWLEDGED")
	waitStatus(t, rl.client, broken, "INVALID-ACKNOWLEDGED")

	events := received(t, out)
	byMsg := map[string]sdk.Event{}
	for _, e := range events {
		byMsg[e.MessageID] = e
	}
	e := byMsg[ok]
	if e.Outcome != "SENT" || e.EventID == "" || e.RFC822MessageID != m.MessageID || e.PreviousStatus != "PROCESSING" ||
		e.Attempts != 1 || e.Sender != "app@example.com" || e.Batch != "b7" || e.At == "" || e.DeliveryAttempt != 1 ||
		!strings.Contains(e.Reason, "delivered") {
		t.Errorf("SENT event %+v", e)
	}
	if len(e.Recipients) != 1 || e.Recipients[0].Code != 250 || e.Recipients[0].Host != "127.0.0.1" || e.Recipients[0].Status != "sent" {
		t.Errorf("SENT recipients %+v", e.Recipients)
	}
	if m.Events[0].ID != e.EventID || m.Events[0].State != "acked" || fmt.Sprint(m.Events[0].Acked) != "[test]" {
		t.Errorf("stored event %+v", m.Events)
	}
	f := byMsg[bad]
	if f.Outcome != "FAILED" || len(f.Recipients) != 1 || f.Recipients[0].Code != 550 || f.Recipients[0].EnhancedCode != "5.1.1" ||
		f.Recipients[0].Text != "no such user" || f.PreviousStatus != "PROCESSING" {
		t.Errorf("FAILED event %+v", f)
	}
	// ACCEPTED when intake prepared what its relay accepted, INTAKING when
	// its poll claimed the message first.
	if i := byMsg[broken]; i.Outcome != "INVALID" || i.PreviousStatus != "ACCEPTED" && i.PreviousStatus != "INTAKING" || !strings.Contains(i.Reason, "malformed") ||
		len(i.Recipients) != 1 || i.Recipients[0].Status != "pending" {
		t.Errorf("INVALID event %+v", i)
	}
}

func TestPluginParkAndReplay(t *testing.T) {
	cfg, _ := testConfig(t)
	gate := filepath.Join(t.TempDir(), "gate")
	os.WriteFile(gate, nil, 0o644)
	out := testPlugin(t, &cfg, "fail-while", map[string]string{"TESTPLUGIN_GATE": gate})
	cfg.Plugins[0].MaxAttempts = 2
	rl := start(t, cfg)
	id := sendTo(t, rl.r.SMTPAddr().String(), []string{"user@example.net"}, "", "x\r\n")
	ctx := context.Background()
	var parked string
	deadline := time.Now().Add(60 * time.Second)
	for parked == "" {
		list, err := rl.client.Events(ctx, "parked", 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Events) == 1 {
			parked = list.Events[0].ID
			if list.Events[0].MessageID != id || !strings.Contains(list.Events[0].LastError, "the gate is closed") || list.Events[0].Attempts != 2 {
				t.Errorf("parked event %+v", list.Events[0])
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the event was not parked")
		}
		time.Sleep(20 * time.Millisecond)
	}
	m, _ := rl.client.Get(ctx, id)
	if m.Status != "SENT" {
		t.Errorf("a message whose event is parked is %s; it must wait in SENT", m.Status)
	}
	body := scrape(t, rl)
	for _, want := range []string{"postino_events_parked 1", `postino_plugin_calls_total{plugin="test"} 2`,
		`postino_plugin_failures_total{plugin="test"} 2`, `postino_plugin_call_seconds_count{plugin="test"} 2`,
		"postino_events_parked_total 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, grep(body, "plugin"))
		}
	}
	os.Remove(gate)
	if _, err := rl.client.Replay(ctx, parked); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	if n := len(received(t, out)); n != 3 {
		t.Errorf("%d calls, want 3 (two failures, then the replay)", n)
	}
	if _, err := rl.client.Replay(ctx, parked); err == nil || !strings.Contains(err.Error(), "not parked") {
		t.Errorf("replay of an acknowledged event: %v", err)
	}
	if body := scrape(t, rl); !strings.Contains(body, "postino_events_parked 0") {
		t.Errorf("the parked gauge did not fall after the replay:\n%s", grep(body, "parked"))
	}
}

func TestPluginDownAtStart(t *testing.T) {
	for _, tt := range []struct {
		name string
		mode string
		path string
		want string
	}{
		{"missing binary", "ok", "/nonexistent/plugin", "start plugin"},
		{"other contract version", "old", "", "another version of the plugin contract"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, up := testConfig(t)
			testPlugin(t, &cfg, tt.mode, nil)
			if tt.path != "" {
				cfg.Plugins[0].Path = tt.path
			}
			rl := start(t, cfg)
			// The relay takes and delivers mail all the same; the event waits.
			id := sendTo(t, rl.r.SMTPAddr().String(), []string{"user@example.net"}, "", "x\r\n")
			waitStatus(t, rl.client, id, "SENT")
			if len(up.Messages()) != 1 {
				t.Error("the message was not delivered while a plugin is down")
			}
			resp, err := http.Get("http://" + rl.r.AdminAddr().String() + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			var body struct {
				Status string            `json:"status"`
				Checks map[string]string `json:"checks"`
			}
			json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != 200 || body.Status != "degraded" || !strings.Contains(body.Checks["plugin test"], tt.want) {
				t.Errorf("/readyz %d %+v, want degraded with %q", resp.StatusCode, body, tt.want)
			}
		})
	}
}

func TestWebhookPlugin(t *testing.T) {
	secret := "webhook-secret"
	var mu sync.Mutex
	var got []sdk.Event
	fail := 1 // the first request is refused
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ts := r.Header.Get("X-Postino-Timestamp")
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(ts + "."))
		mac.Write(body)
		want := "v1=" + hex.EncodeToString(mac.Sum(nil))
		if !hmac.Equal([]byte(want), []byte(r.Header.Get("X-Postino-Signature"))) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		var e sdk.Event
		json.Unmarshal(body, &e)
		if r.Header.Get("X-Postino-Event-Id") != e.EventID {
			http.Error(w, "event id header", http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if fail > 0 {
			fail--
			http.Error(w, "try later", http.StatusServiceUnavailable)
			return
		}
		got = append(got, e)
	}))
	defer srv.Close()
	secretFile := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secretFile, []byte(secret+"\n"), 0o600)

	cfg, _ := testConfig(t)
	p := relay.DefaultPlugin(build(t, "github.com/genropy/postino/contrib/plugins/webhook"))
	p.Env = map[string]string{"POSTINO_WEBHOOK_URL": srv.URL, "POSTINO_WEBHOOK_SECRET_FILE": secretFile}
	p.Retry = relay.PluginRetryConfig{First: relay.Duration(50 * time.Millisecond), Max: relay.Duration(100 * time.Millisecond)}
	cfg.Plugins = []relay.PluginConfig{p}
	rl := start(t, cfg)
	id := sendTo(t, rl.r.SMTPAddr().String(), []string{"user@example.net"}, "", "x\r\n")
	m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].MessageID != id || got[0].Outcome != "SENT" || got[0].DeliveryAttempt != 2 {
		t.Errorf("the receiver got %+v", got)
	}
	if !strings.Contains(historyText(m), "503") {
		t.Errorf("the refused try is not in the history:%s", historyText(m))
	}
}

func TestExecPlugin(t *testing.T) {
	dir := t.TempDir()
	cfg, _ := testConfig(t)
	p := relay.DefaultPlugin(build(t, "github.com/genropy/postino/contrib/plugins/exec"))
	p.Env = map[string]string{"POSTINO_EXEC_COMMAND": `cat > "` + dir + `/$POSTINO_EVENT_ID.json"`, "POSTINO_EXEC_OUTCOMES": "SENT"}
	cfg.Plugins = []relay.PluginConfig{p}
	rl := start(t, cfg)
	id := sendTo(t, rl.r.SMTPAddr().String(), []string{"user@example.net"}, "", "x\r\n")
	m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
	b, err := os.ReadFile(filepath.Join(dir, m.Events[0].ID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var e sdk.Event
	if err := json.Unmarshal(b, &e); err != nil || e.MessageID != id || e.Outcome != "SENT" {
		t.Errorf("the command got %s (%v)", b, err)
	}
}
