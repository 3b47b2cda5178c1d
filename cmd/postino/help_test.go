package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// flagRE finds the flags a synopsis or a help text names.
var (
	synopsisFlagRE = regexp.MustCompile(`--([a-z][a-z0-9-]*)`)
	helpFlagRE     = regexp.MustCompile(`(?m)^  --([a-z][a-z0-9-]*)`)
	// helpValueRE and synopsisValueRE find a flag and the name of its
	// value, in the help's list and in the synopsis.
	helpValueRE     = regexp.MustCompile(`(?m)^  --([a-z][a-z0-9-]*) (\S+)$`)
	synopsisValueRE = regexp.MustCompile(`--([a-z][a-z0-9-]*) ([^\]\s]+)`)
)

func flagNames(re *regexp.Regexp, s string) []string {
	var names []string
	for _, m := range re.FindAllStringSubmatch(s, -1) {
		if !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	slices.Sort(names)
	return names
}

// checkEnds checks that out is lines, each ended, with no blank line at
// the end.
func checkEnds(t *testing.T, what, out string) {
	t.Helper()
	if !strings.HasSuffix(out, "\n") || strings.HasSuffix(out, "\n\n") || strings.TrimSpace(out) == "" {
		t.Errorf("%s does not end with one line end after its last line:\n%q", what, out)
	}
}

// TestHelp runs every command of the command table with --help: it exits
// 0, prints to standard output the command's usage and exactly the flags
// the command takes (those its synopsis names), and ends without a blank
// line. postino help COMMAND says the same.
func TestHelp(t *testing.T) {
	t.Setenv("POSTINO_CONFIG", "")
	for _, c := range commands() {
		t.Run(c.name, func(t *testing.T) {
			args := append(strings.Fields(c.name), "--help")
			out, errOut, code := cli(t, args...)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if !strings.HasPrefix(out, "Usage: postino "+c.name) {
				t.Errorf("help does not start with the command's usage:\n%s", out)
			}
			if got, want := flagNames(helpFlagRE, out), flagNames(synopsisFlagRE, c.synopsis); !slices.Equal(got, want) {
				t.Errorf("help lists the flags %v, the synopsis %v:\n%s", got, want, out)
			}
			// A flag's value is named in the help as in the synopsis.
			inSynopsis := map[string]string{}
			for _, m := range synopsisValueRE.FindAllStringSubmatch(c.synopsis, -1) {
				inSynopsis[m[1]] = m[2]
			}
			for _, m := range helpValueRE.FindAllStringSubmatch(out, -1) {
				if want, ok := inSynopsis[m[1]]; ok && m[2] != want {
					t.Errorf("help names --%s's value %s, the synopsis %s", m[1], m[2], want)
				}
			}
			checkEnds(t, "help", out)
			again, _, code := cli(t, append([]string{"help"}, strings.Fields(c.name)...)...)
			if code != 0 || again != out {
				t.Errorf("postino help %s: exit %d:\n%s", c.name, code, again)
			}
		})
	}
	groups := map[string]bool{}
	for _, c := range commands() {
		if first, _, ok := strings.Cut(c.name, " "); ok {
			groups[first] = true
		}
	}
	for g := range groups {
		t.Run(g, func(t *testing.T) {
			out, errOut, code := cli(t, g, "--help")
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			for _, c := range groupOf(commands(), g) {
				if !strings.Contains(out, "postino "+c.name+" ") {
					t.Errorf("%s --help does not show %s:\n%s", g, c.name, out)
				}
			}
			checkEnds(t, "help", out)
		})
	}
	for _, arg := range []string{"help", "--help", "-h"} {
		out, _, code := cli(t, arg)
		if code != 0 {
			t.Errorf("postino %s: exit %d", arg, code)
		}
		for _, c := range commands() {
			if !strings.Contains(out, "postino "+c.name) {
				t.Errorf("postino %s does not show %s", arg, c.name)
			}
		}
		checkEnds(t, "postino "+arg, out)
	}
}

// TestUsageErrorText checks that a command line that cannot be understood
// exits 2 with one line saying what is wrong, then the usage of the
// command at fault, and no blank line.
func TestUsageErrorText(t *testing.T) {
	t.Setenv("POSTINO_CONFIG", "")
	t.Setenv("POSTINO_OUTBOX_MYSQL_DSN", "")
	file := filepath.Join("..", "..", "relay", "pec", "testdata", "accettazione.eml")
	tests := []struct {
		args  []string
		first string // the first line
		usage string // in the lines after it
	}{
		{nil, "postino: no command given", "commands: serve, queue,"},
		{[]string{"frob"}, `postino: unknown command "frob"`, "'postino help' shows their usage"},
		{[]string{"queue"}, "postino: queue needs a command: list, search, show, retry, cancel or receipts", "  postino queue receipts ID"},
		{[]string{"queue", "explode", "x"}, `postino: unknown queue command "explode": use list, search, show`, "  postino queue list"},
		{[]string{"queue", "show"}, "postino: queue show takes ID", "usage: postino queue show ID [--json]"},
		{[]string{"queue", "show", "x", "--limit", "3"}, "postino: queue show: unknown flag --limit", "usage: postino queue show ID"},
		{[]string{"queue", "list", "--limit"}, "postino: queue list: flag --limit needs a value", "usage: postino queue list"},
		{[]string{"events", "list", "--state", "bogus"}, `postino: events list: --state "bogus": use failing, pending, calling, acked or parked`, "usage: postino events list"},
		{[]string{"batch", "suspend"}, "postino: batch suspend takes CODE", "usage: postino batch suspend CODE"},
		{[]string{"version", "x"}, `postino: version takes no arguments, only flags ("x" is not one)`, "usage: postino version"},
		{[]string{"migrate"}, "postino: migrate needs the MySQL DSN: give --dsn DSN, set POSTINO_OUTBOX_MYSQL_DSN, " +
			"or set outbox.mysql.dsn, dsn_file or dsn_env in the --config file", "usage: postino migrate"},
		{[]string{"migrate", "--backend", "postgres"}, "postino: migrate needs the PostgreSQL DSN: give --dsn postgres://…, set POSTINO_OUTBOX_POSTGRES_DSN", "usage: postino migrate"},
		{[]string{"migrate", "--backend", "sqlite"}, `postino: migrate --backend "sqlite": use mysql or postgres`, "usage: postino migrate"},
		{[]string{"dkim", "keygen", "--domain", "example.com"}, "postino: dkim keygen needs --selector and --out", "usage: postino dkim keygen"},
		{[]string{"pec", "parse", "--at", "yesterday", file}, `postino: --at "yesterday" is neither an RFC 3339 time`, "usage: postino pec parse"},
		{[]string{"pec", "parse"}, "postino: pec parse needs at least one FILE to read", "usage: postino pec parse FILE..."},
		// Flags before the command's name are the command's: one it does
		// not take is refused naming it.
		{[]string{"--json", "serve"}, "postino: serve: unknown flag --json", "usage: postino serve"},
		{[]string{"--limit", "3", "queue", "show", "x"}, "postino: queue show: unknown flag --limit", "usage: postino queue show ID"},
		{[]string{"--admin", "127.0.0.1:1"}, "postino: no command after --admin 127.0.0.1:1: flags go with a command, before or after its name", "commands: serve, queue,"},
		{[]string{"--admin", "127.0.0.1:1", "frob"}, `postino: unknown command "frob"`, "'postino help' shows their usage"},
		{[]string{"--admin=127.0.0.1:1", "queue"}, "postino: queue needs a command: list,", "  postino queue receipts ID"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, code := cli(t, tt.args...)
			if code != 2 || out != "" {
				t.Errorf("exit %d, stdout %q; want 2 and nothing", code, out)
			}
			first, rest, _ := strings.Cut(errOut, "\n")
			if !strings.HasPrefix(first, tt.first) || !strings.Contains(rest, tt.usage) {
				t.Errorf("stderr:\n%s\nwant a first line starting %q, then %q", errOut, tt.first, tt.usage)
			}
			if strings.Contains(errOut, "\n\n") {
				t.Errorf("stderr has a blank line:\n%q", errOut)
			}
			checkEnds(t, "stderr", errOut)
		})
	}
}

// TestMigrateNamesTheVariable checks that a DSN read from an empty
// variable names it.
func TestMigrateNamesTheVariable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "postino.yaml")
	if err := os.WriteFile(path, []byte("outbox:\n  backend: mysql\n  mysql:\n    dsn_env: APP_DB_DSN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("APP_DB_DSN", "")
	_, errOut, code := cli(t, "migrate", "--config", path)
	if code != 1 || !strings.Contains(errOut, "environment variable APP_DB_DSN is empty or unset") {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

// noConfig are the commands that read no configuration file.
var noConfig = []string{"dynamodb create-table", "dkim keygen", "submissions schema", "submissions migrate", "version"}

// TestConfigFlag checks that every command that reads the configuration
// takes --config and reads that file: a file with a wrong setting stops it
// with an error that names the file. A new command either takes --config
// or joins noConfig.
func TestConfigFlag(t *testing.T) {
	t.Setenv("POSTINO_CONFIG", "")
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("bogus_setting: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range commands() {
		takes := strings.Contains(c.synopsis, "--config FILE")
		if takes == slices.Contains(noConfig, c.name) {
			t.Errorf("%s: takes --config %v, but noConfig says otherwise: a command that reads the configuration takes --config", c.name, takes)
		}
		if !takes {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			args := append(strings.Fields(c.name), positional(c.synopsis)...)
			_, errOut, code := cli(t, append(args, "--config", bad)...)
			if code != 1 || !strings.Contains(errOut, "config "+bad+" line 1: bogus_setting is not a setting") {
				t.Errorf("exit %d: %s", code, errOut)
			}
		})
	}
}

// positional makes up the arguments a synopsis asks for before its flags.
func positional(synopsis string) []string {
	var args []string
	for _, w := range synopsisWords(synopsis) {
		if strings.HasPrefix(w, "[") || strings.HasPrefix(w, "--") {
			break
		}
		args = append(args, "x")
	}
	return args
}

// TestConfigFlagReachesRelay checks that the commands that talk to a relay
// find it at the admin.listen of the file --config names.
func TestConfigFlagReachesRelay(t *testing.T) {
	t.Setenv("POSTINO_CONFIG", "")
	t.Setenv("POSTINO_ADMIN", "") // restored when the test ends
	os.Unsetenv("POSTINO_ADMIN")
	r := startRelay(t)
	path := filepath.Join(t.TempDir(), "postino.yaml")
	if err := os.WriteFile(path, []byte("admin:\n  listen: "+r.AdminAddr().String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"queue", "list"}, 0, "ID"},
		{[]string{"queue", "search", "nobody@example.net"}, 0, "no message"},
		{[]string{"queue", "show", "missing"}, 1, "not found"},
		{[]string{"queue", "retry", "missing"}, 1, "not found"},
		{[]string{"queue", "cancel", "missing"}, 1, "not found"},
		{[]string{"queue", "receipts", "missing"}, 1, "not found"},
		{[]string{"batch", "suspend", "b1"}, 0, "suspended"},
		{[]string{"batch", "activate", "b1"}, 0, "activated"},
		{[]string{"events", "list"}, 0, "no failing events"},
		{[]string{"events", "replay", "missing"}, 1, "not found"},
		{[]string{"health"}, 0, "ready"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, code := cli(t, append(tt.args, "--config", path)...)
			if code != tt.code || !strings.Contains(out+errOut, tt.want) {
				t.Errorf("exit %d, want %d with %q:\n%s%s", code, tt.code, tt.want, out, errOut)
			}
		})
	}
}

// TestFlagsBeforeCommand checks that flags put before a command's name
// are the command's own, as if they followed it.
func TestFlagsBeforeCommand(t *testing.T) {
	t.Setenv("POSTINO_CONFIG", "")
	t.Setenv("POSTINO_ADMIN", "") // restored when the test ends
	os.Unsetenv("POSTINO_ADMIN")
	r := startRelay(t)
	addr := r.AdminAddr().String()
	config := filepath.Join(t.TempDir(), "postino.yaml")
	if err := os.WriteFile(config, []byte("admin:\n  listen: "+addr+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("bogus_setting: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--admin", addr, "queue", "list"}, 0, "ID"},
		{[]string{"--admin=" + addr, "queue", "list", "--status", "READY"}, 0, "ID"},
		{[]string{"--json", "--admin", addr, "queue", "list"}, 0, `"messages"`},
		{[]string{"--status", "READY", "queue", "list", "--admin", addr, "--json"}, 0, `"messages"`},
		{[]string{"--config", config, "queue", "search", "nobody@example.net"}, 0, "no message"},
		{[]string{"--admin", addr, "health"}, 0, "ready"},
		{[]string{"--config", bad, "serve"}, 1, "config " + bad + " line 1: bogus_setting is not a setting"},
		{[]string{"--config", bad, "config", "print"}, 1, "config " + bad + " line 1: bogus_setting is not a setting"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			out, errOut, code := cli(t, tt.args...)
			if code != tt.code || !strings.Contains(out+errOut, tt.want) {
				t.Errorf("exit %d, want %d with %q:\n%s%s", code, tt.code, tt.want, out, errOut)
			}
		})
	}
}
