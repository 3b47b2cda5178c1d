package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/relaytest"
)

// startRelay runs a relay in this process for the client commands to talk to.
func startRelay(t *testing.T) *relay.Relay {
	t.Helper()
	return startRelayIn(t, t.TempDir())
}

// startRelayIn runs it with its data in dir.
func startRelayIn(t *testing.T, dir string) *relay.Relay {
	t.Helper()
	cfg := relay.DefaultConfig()
	cfg.DataDir = dir
	cfg.SMTP.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = "127.0.0.1:0"
	cfg.Intake.Poll = relay.Duration(50 * time.Millisecond)
	r, _ := relaytest.Start(t, cfg)
	return r
}

func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// cliJSON runs a command that prints JSON and decodes what it prints into v.
func cliJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	out, errOut, code := cli(t, args...)
	if code != 0 {
		t.Fatalf("postino %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("postino %s printed no JSON: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func sendOne(t *testing.T, addr, header string) {
	t.Helper()
	c, err := smtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = c.SendMail("app@example.com", []string{"user@example.net"},
		strings.NewReader("From: app@example.com\r\n"+header+"Subject: cli\r\n\r\nbody\r\n"))
	if err != nil {
		t.Fatal(err)
	}
}

func TestQueueCommands(t *testing.T) {
	r := startRelay(t)
	admin := r.AdminAddr().String()
	// Due in an hour, so that it waits in READY for the commands.
	sendAfter := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	sendOne(t, r.SMTPAddr().String(), "X-Genro-Mail-ID: cli-1\r\nX-Postino-Batch: b1\r\nX-Postino-Send-After: "+sendAfter+"\r\n")

	deadline := time.Now().Add(60 * time.Second)
	var show map[string]any
	for {
		show = nil
		cliJSON(t, &show, "queue", "show", "cli-1", "--json", "--admin", admin)
		if show["status"] == "READY" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, k := range []string{"id", "status", "attempts", "message_id", "recipients", "history"} {
		if _, ok := show[k]; !ok {
			t.Errorf("queue show --json lacks %q: %v", k, show)
		}
	}
	hist, _ := show["history"].([]any)
	// ACCEPTED and READY, with INTAKING between when the intake's poll
	// claimed the message before the hand-over was prepared.
	if len(hist) != 2 && len(hist) != 3 {
		t.Fatalf("history %v", show["history"])
	}
	for _, h := range hist {
		e := h.(map[string]any)
		for _, k := range []string{"status", "reason", "at"} {
			if _, ok := e[k]; !ok {
				t.Errorf("history entry lacks %q: %v", k, e)
			}
		}
	}

	out, _, code := cli(t, "queue", "show", "cli-1", "--admin", admin)
	if code != 0 || !strings.Contains(out, "Status:") || !strings.Contains(out, "ACCEPTED") || !strings.Contains(out, "user@example.net") {
		t.Errorf("queue show:\n%s", out)
	}
	out, _, code = cli(t, "queue", "list", "--admin", admin)
	if code != 0 || !strings.HasPrefix(out, "ID") || !strings.Contains(out, "cli-1") {
		t.Errorf("queue list:\n%s", out)
	}
	for _, q := range []string{"cli-1", show["message_id"].(string), "User@Example.net"} {
		out, _, code = cli(t, "queue", "search", q, "--admin", admin)
		if code != 0 || !strings.HasPrefix(out, "ID") || !strings.Contains(out, "cli-1") {
			t.Errorf("queue search %s:\n%s", q, out)
		}
	}
	out, _, code = cli(t, "queue", "search", "nobody@example.net", "--admin", admin)
	if code != 0 || !strings.Contains(out, "no message") {
		t.Errorf("queue search for an unknown recipient: %d\n%s", code, out)
	}
	var page struct {
		Messages []map[string]any `json:"messages"`
	}
	cliJSON(t, &page, "queue", "list", "--status", "ready", "--json", "--admin", admin)
	if len(page.Messages) != 1 {
		t.Errorf("queue list --json: %+v", page)
	}
	out, _, code = cli(t, "batch", "suspend", "b1", "--admin", admin)
	if code != 0 || !strings.Contains(out, "suspended") {
		t.Errorf("batch suspend: %d %s", code, out)
	}
	out, _, code = cli(t, "batch", "activate", "b1", "--admin", admin)
	if code != 0 || !strings.Contains(out, "activated") {
		t.Errorf("batch activate: %d %s", code, out)
	}
	out, _, code = cli(t, "queue", "cancel", "cli-1", "--admin", admin)
	if code != 0 || !strings.Contains(out, "FAILED") {
		t.Errorf("queue cancel: %d %s", code, out)
	}
	_, errOut, code := cli(t, "queue", "cancel", "missing", "--admin", admin)
	if code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("cancel of an unknown id: %d %s", code, errOut)
	}

	// Retried, the cancelled message waits for its send-after again;
	// with --now it is due now (its batch suspended, so that it stays).
	out, _, code = cli(t, "queue", "retry", "cli-1", "--admin", admin)
	if want := "cli-1 is now READY: retry requested by an operator; due at its X-Postino-Send-After, " + sendAfter; code != 0 || !strings.Contains(out, want) {
		t.Errorf("queue retry: %d %s; want %q", code, out, want)
	}
	cli(t, "batch", "suspend", "b1", "--admin", admin)
	if out, _, code = cli(t, "queue", "cancel", "cli-1", "--admin", admin); code != 0 {
		t.Fatalf("second cancel: %d %s", code, out)
	}
	var retried struct {
		Status string    `json:"status"`
		Reason string    `json:"reason"`
		DueAt  time.Time `json:"due_at"`
	}
	cliJSON(t, &retried, "queue", "retry", "cli-1", "--now", "--json", "--admin", admin)
	if retried.Status != "READY" || retried.DueAt.After(time.Now()) || strings.Contains(retried.Reason, "due at") {
		t.Errorf("queue retry --now: %+v; want READY due now", retried)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"frob"}, {"queue"}, {"queue", "show"}, {"queue", "explode", "x"}, {"batch", "suspend"}} {
		if _, _, code := cli(t, args...); code != 2 {
			t.Errorf("postino %v: exit %d, want 2", args, code)
		}
	}
	if out, _, code := cli(t, "version"); code != 0 || !strings.HasPrefix(out, "postino ") {
		t.Errorf("version: %d %q", code, out)
	}
}

func TestRelayDown(t *testing.T) {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	_, errOut, code := cli(t, "queue", "list", "--admin", addr)
	if code != 1 || !strings.Contains(errOut, "is postino serve running") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

func TestServeRefusesOpenRelay(t *testing.T) {
	_, errOut, code := cli(t, "serve", "--listen", "0.0.0.0:0", "--data", t.TempDir())
	if code != 1 || !strings.Contains(errOut, "allow_networks") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

func TestServeFlagsOverrideEnv(t *testing.T) {
	data := t.TempDir()
	t.Setenv("POSTINO_LISTEN", "127.0.0.1:1") // would fail to bind if used
	t.Setenv("POSTINO_ADMIN", "127.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var out, errOut bytes.Buffer
	code := run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--data", data}, &out, &errOut)
	if code != 0 || !strings.Contains(errOut.String(), "postino serving") || !strings.Contains(errOut.String(), "data="+data) {
		t.Errorf("serve exit %d:\n%s", code, errOut.String())
	}
}

// TestBatchCommands: batch list and show give a campaign's progress, queue
// list --batch its messages, held ones saying by which batch, and batch
// cancel ends its waiting messages with the reason.
func TestBatchCommands(t *testing.T) {
	r := startRelay(t)
	admin := r.AdminAddr().String()
	sendAfter := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, id := range []string{"camp-1", "camp-2"} {
		sendOne(t, r.SMTPAddr().String(), "X-Genro-Mail-ID: "+id+"\r\nX-Postino-Batch: camp\r\nX-Postino-Send-After: "+sendAfter+"\r\n")
	}
	// Both READY, and counted into the batch (the brake flushes each second).
	deadline := time.Now().Add(60 * time.Second)
	var b struct {
		Code     string         `json:"code"`
		Statuses map[string]int `json:"statuses"`
		Progress struct {
			Messages int `json:"messages"`
			Waiting  int `json:"waiting"`
			Held     int `json:"held"`
			Failed   int `json:"failed"`
		} `json:"progress"`
	}
	for b.Statuses["READY"] != 2 || b.Progress.Messages != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("batch show --json: %+v", b)
		}
		time.Sleep(50 * time.Millisecond)
		cli(t, "batch", "show", "camp", "--admin", admin) // the text form runs too
		b.Statuses = nil
		cliJSON(t, &b, "batch", "show", "camp", "--json", "--admin", admin)
	}
	out, _, code := cli(t, "batch", "list", "--admin", admin)
	if code != 0 || !strings.HasPrefix(out, "BATCH") || !strings.Contains(out, "camp") || !strings.Contains(out, "active") {
		t.Errorf("batch list: %d\n%s", code, out)
	}
	if out, _, code := cli(t, "batch", "list", "--after", "camp", "--admin", admin); code != 0 || strings.Contains(out, "camp") {
		t.Errorf("batch list --after camp: %d\n%s", code, out)
	}
	cli(t, "batch", "suspend", "camp", "--admin", admin)
	out, _, code = cli(t, "queue", "list", "--batch", "camp", "--admin", admin)
	if code != 0 || strings.Count(out, "held: batch camp suspended") != 2 {
		t.Errorf("queue list --batch camp:\n%s", out)
	}
	var page struct {
		Messages []struct {
			ID     string `json:"id"`
			HeldBy string `json:"held_by"`
		} `json:"messages"`
	}
	cliJSON(t, &page, "queue", "list", "--batch", "camp", "--json", "--admin", admin)
	if len(page.Messages) != 2 || page.Messages[0].HeldBy != "camp" {
		t.Errorf("queue list --batch --json: %+v", page)
	}
	if _, errOut, code := cli(t, "batch", "cancel", "camp", "--admin", admin); code == 0 || !strings.Contains(errOut, "--reason") {
		t.Errorf("batch cancel without --reason: %d %s", code, errOut)
	}
	out, _, code = cli(t, "batch", "cancel", "camp", "--reason", "wrong list", "--admin", admin)
	if code != 0 || !strings.Contains(out, "2 waiting messages ended FAILED") {
		t.Errorf("batch cancel: %d %s", code, out)
	}
	cliJSON(t, &b, "batch", "show", "camp", "--json", "--admin", admin)
	if b.Progress.Failed != 2 || b.Progress.Held != 0 {
		t.Errorf("after the cancel: %+v", b)
	}
}
