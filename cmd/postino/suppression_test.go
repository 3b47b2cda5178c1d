package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/relaytest"
)

func TestSuppressionCommands(t *testing.T) {
	cfg := relay.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.SMTP.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Streams = []relay.StreamConfig{{Name: "news"}}
	r, _ := relaytest.Start(t, cfg)
	adminAddr := r.AdminAddr().String()
	run := func(args ...string) (string, string, int) {
		t.Helper()
		return cli(t, append(append([]string{"suppression"}, args...), "--admin", adminAddr)...)
	}
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"list"}, 0, "no entry matches\nthe list holds 0 entries\n"},
		{[]string{"add", "Ann@Example.COM", "--scope", "news", "--note", "asked by phone", "--operator", "ann", "--expires", "90d"},
			0, "Ann@Example.COM is suppressed for stream news since "},
		{[]string{"add", "Ann@example.com", "--scope", "news"}, 0, "already: its entry stays as it was"},
		{[]string{"add", "nobody"}, 1, `"nobody" is not an address: give it as local-part@domain`},
		{[]string{"add", "x@example.com", "--expires", "soon"}, 2, `--expires "soon": give an RFC 3339 time`},
		{[]string{"list"}, 0, "the list holds 1 entries: manual 1\n"},
		{[]string{"show", "Ann@example.com"}, 0, "operator ann"},
		{[]string{"show", "ann@example.com"}, 0, "ann@example.com is not on the suppression list\n"},
		{[]string{"check", "Ann@example.com", "--stream", "news"}, 0, "mail of stream news to Ann@example.com is held back:\n  suppressed for stream news since "},
		{[]string{"check", "Ann@example.com"}, 0, "mail of stream transactional to Ann@example.com goes out"},
		{[]string{"remove", "Ann@example.com"}, 1, "its entries are of scope news: give that scope"},
		{[]string{"remove", "Ann@example.com", "--scope", "news", "--note", "a mistake"}, 0, "Ann@example.com is off the suppression list for stream news\n"},
		{[]string{"remove", "Ann@example.com", "--scope", "news"}, 1, "Ann@example.com is not on the suppression list"},
	}
	for _, tt := range tests {
		out, errOut, code := run(tt.args...)
		if code != tt.code || !strings.Contains(out+errOut, tt.want) {
			t.Errorf("suppression %s: exit %d, want %d with %q:\n%s%s", strings.Join(tt.args, " "), code, tt.code, tt.want, out, errOut)
		}
	}
	var shown struct {
		History []struct{ Action, By, Note string }
	}
	cliJSON(t, &shown, "suppression", "show", "Ann@example.com", "--json", "--admin", adminAddr)
	if len(shown.History) != 2 || shown.History[1].Action != "removed" || shown.History[1].Note != "a mistake" {
		t.Errorf("history %+v", shown.History)
	}

	dir := t.TempDir()
	file := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := file("bad.csv", "EmailAddress,Reason\ngood@example.com,BOUNCE\nbad,COMPLAINT\n")
	_, errOut, code := run("import", bad)
	if code != 1 || !strings.Contains(errOut, "nothing of it: 1 bad lines") || !strings.Contains(errOut, "\n  line 3: \"bad\" is not an address") {
		t.Errorf("import of a bad file: exit %d: %s", code, errOut)
	}
	good := file("ses.csv", "EmailAddress,Reason,LastUpdateTime\ngood@example.com,BOUNCE,2026-01-02T03:04:05Z\nspam@example.com,COMPLAINT,2026-01-02T03:04:05Z\n")
	// An ESP's complaints name no stream: --scope gives theirs.
	if _, errOut, code := run("import", good); code != 1 || !strings.Contains(errOut, "--scope STREAM") {
		t.Errorf("import of complaints without --scope: exit %d: %s", code, errOut)
	}
	var imported struct{ Imported int }
	cliJSON(t, &imported, "suppression", "import", good, "--scope", "news", "--json", "--admin", adminAddr)
	if imported.Imported != 2 {
		t.Errorf("import: %+v", imported)
	}
	if _, errOut, code := run("import", filepath.Join(dir, "missing.csv")); code != 1 || !strings.Contains(errOut, "cannot read the file to import") {
		t.Errorf("import of a missing file: exit %d: %s", code, errOut)
	}

	want := "address,scope,reason,created,expires\ngood@example.com,*,hard_bounce,2026-01-02T03:04:05Z,\nspam@example.com,news,complaint,2026-01-02T03:04:05Z,\n"
	if out, errOut, code := run("export"); code != 0 || out != want {
		t.Errorf("export: exit %d: %s%s", code, out, errOut)
	}
	path := filepath.Join(dir, "out.csv")
	if out, _, code := run("export", path, "--reason", "complaint"); code != 0 || out != "wrote 1 entries to "+path+"\n" {
		t.Errorf("export to a file: exit %d: %s", code, out)
	}
	if b, _ := os.ReadFile(path); !strings.HasSuffix(string(b), "\nspam@example.com,news,complaint,2026-01-02T03:04:05Z,\n") {
		t.Errorf("the file exported:\n%s", b)
	}
	if _, errOut, code := run("export", "--json"); code != 2 || !strings.Contains(errOut, "--json says what was written to a FILE") {
		t.Errorf("export --json without a file: exit %d: %s", code, errOut)
	}
	if _, errOut, code := run("export", "a", "b"); code != 2 || !strings.Contains(errOut, "suppression export takes [FILE]") {
		t.Errorf("export with two files: exit %d: %s", code, errOut)
	}
	var page struct {
		Entries []struct{ Key string }
		Next    string
	}
	cliJSON(t, &page, "suppression", "list", "--limit", "1", "--json", "--admin", adminAddr)
	if len(page.Entries) != 1 || page.Next == "" {
		t.Fatalf("list --limit 1: %+v", page)
	}
	out, _, _ := run("list", "--after", page.Next)
	if !strings.HasPrefix(out, "ADDRESS") || !strings.Contains(out, "spam@example.com") || strings.Contains(out, "good@example.com") {
		t.Errorf("list --after:\n%s", out)
	}
}

func TestParseExpires(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Time
	}{
		{"", time.Time{}},
		{"90d", now.AddDate(0, 0, 90)},
		{"36h", now.Add(36 * time.Hour)},
		{"2026-06-01T00:00:00Z", time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)},
		{"2026-06-01", time.Date(2026, 6, 1, 0, 0, 0, 0, time.Local)},
	}
	for _, tt := range tests {
		if got, err := parseExpires(tt.in, now); err != nil || !got.Equal(tt.want) {
			t.Errorf("%q: %v, %v; want %v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"soon", "-1h", "0d", "d"} {
		if _, err := parseExpires(bad, now); err == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}
