package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/genropy/postino/relay/delivery"
)

// listed are the values a sentence lists: "none, opportunistic (…) or
// `tls`" is none, opportunistic and tls; the list ends at a semicolon or
// a full stop.
func listed(sentence string) []string {
	s := regexp.MustCompile(`\([^()]*\)`).ReplaceAllString(sentence, "")
	s, _, _ = strings.Cut(s, ";")
	s, _, _ = strings.Cut(s, ". ")
	var out []string
	for _, w := range strings.Split(strings.ReplaceAll(s, " or ", ","), ",") {
		if w = strings.Trim(strings.TrimSpace(w), "`."); w != "" {
			out = append(out, w)
		}
	}
	return out
}

// TestRouteTLSModes holds every place that lists the TLS modes of a route
// to the one list the relay accepts (delivery.TLSModes): serve's error and
// its help (the synopsis and the flag), docs/delivery.md, the example
// configuration, and what config print shows.
func TestRouteTLSModes(t *testing.T) {
	t.Setenv("POSTINO_CONFIG", "")
	modes := delivery.TLSModes()
	check := func(where string, got []string) {
		t.Helper()
		if !slices.Equal(got, modes) {
			t.Errorf("%s lists %q, want %q", where, got, modes)
		}
	}

	_, errOut, code := cli(t, "serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0",
		"--smarthost", "mail.example.com:587", "--smarthost-tls", "ssl")
	_, list, ok := strings.Cut(errOut, `tls "ssl": use `)
	if code != 1 || !ok {
		t.Fatalf("serve with tls ssl: exit %d: %s", code, errOut)
	}
	check("the error", listed(list))

	help, _, _ := cli(t, "serve", "--help")
	m := regexp.MustCompile(`\[--smarthost-tls ([^\]\s]+)\]`).FindStringSubmatch(help)
	if m == nil {
		t.Fatalf("the synopsis has no --smarthost-tls:\n%s", help)
	}
	check("the synopsis", strings.Split(m[1], "|"))
	_, usage, _ := strings.Cut(help, "TLS mode with the smarthost: ")
	usage, _, _ = strings.Cut(usage, " (POSTINO_SMARTHOST_TLS)")
	check("the help of --smarthost-tls", listed(usage))

	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "delivery.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sentence, ok := strings.Cut(strings.Join(strings.Fields(string(doc)), " "), "A route's `tls` is ")
	if !ok {
		t.Fatal("docs/delivery.md does not say what a route's tls is")
	}
	check("docs/delivery.md", listed(sentence))

	example, err := os.ReadFile(filepath.Join("..", "..", "contrib", "postino.example.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	key, value := exampleKey(t, example, "routes", "default", "tls")
	check("the example's comment on routes.default.tls", listed(strings.ReplaceAll(key.HeadComment, "#", "")))
	if !slices.Contains(modes, value.Value) {
		t.Errorf("the example sets tls %q", value.Value)
	}

	for _, tt := range []struct{ smarthost, want string }{{"", delivery.TLSOpportunistic}, {"mail.example.com:587", delivery.TLSNone}} {
		t.Setenv("POSTINO_SMARTHOST", tt.smarthost)
		out, errOut, code := cli(t, "config", "print")
		var printed struct {
			Routes struct {
				Default struct {
					TLS string `yaml:"tls"`
				} `yaml:"default"`
			} `yaml:"routes"`
		}
		if err := yaml.Unmarshal([]byte(out), &printed); code != 0 || err != nil {
			t.Fatalf("config print: exit %d, %v: %s", code, err, errOut)
		}
		if got := printed.Routes.Default.TLS; got != tt.want {
			t.Errorf("config print with smarthost %q shows tls %q, want %q", tt.smarthost, got, tt.want)
		}
	}
}

// exampleKey finds the key at path in a YAML text, and its value.
func exampleKey(t *testing.T, text []byte, path ...string) (key, value *yaml.Node) {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(text, &doc); err != nil {
		t.Fatal(err)
	}
	n := doc.Content[0]
	for _, name := range path {
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == name {
				key, n, found = n.Content[i], n.Content[i+1], true
				break
			}
		}
		if !found {
			t.Fatalf("no %s in the example", strings.Join(path, "."))
		}
	}
	return key, n
}
