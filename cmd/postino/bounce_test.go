package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestBounceParse(t *testing.T) {
	dir := filepath.Join("..", "..", "relay", "bounce", "testdata")
	out, errOut, code := cli(t, "bounce", "parse", filepath.Join(dir, "postfix.eml"), filepath.Join(dir, "autoreply.eml"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"Kind: bounce", "Keys: X-Genro-Mail-ID pf-0001;", "alice@example.org failed 5.1.1 550 hard user_unknown", "Kind: auto-reply"} {
		if !strings.Contains(flat, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	var rep struct {
		File       string `json:"file"`
		Kind       string `json:"kind"`
		Recipients []struct {
			FinalRecipient string `json:"final_recipient"`
			Status         string `json:"status"`
			Reason         string `json:"reason"`
		} `json:"recipients"`
		Keys struct {
			MailID string `json:"mail_id"`
		} `json:"keys"`
	}
	cliJSON(t, &rep, "bounce", "parse", "--json", filepath.Join(dir, "dsn-multi.eml"))
	if rep.Kind != "bounce" || len(rep.Recipients) < 2 || rep.Keys.MailID == "" || !strings.HasSuffix(rep.File, "dsn-multi.eml") {
		t.Errorf("JSON %+v", rep)
	}

	if _, errOut, code := cli(t, "bounce", "parse", "/nonexistent.eml"); code != 1 || !strings.Contains(errOut, "/nonexistent.eml") {
		t.Errorf("missing file: exit %d: %s", code, errOut)
	}
	if _, errOut, code := cli(t, "bounce", "parse"); code != 2 || !strings.Contains(errOut, "FILE") {
		t.Errorf("no file: exit %d: %s", code, errOut)
	}
}
