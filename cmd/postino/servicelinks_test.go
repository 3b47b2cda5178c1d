package main

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestServeWithServiceLinks runs postino serve with the environment of a
// pod whose namespace has a Service named postino (and postino-admin and
// postino-v6): Kubernetes' variables for them are no settings, and the
// relay starts, listens, and names them once in its log.
func TestServeWithServiceLinks(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a relay process")
	}
	b, err := os.ReadFile(filepath.Join("..", "..", "relay", "testdata", "servicelinks.env"))
	if err != nil {
		t.Fatal(err)
	}
	var env, want []string
	for _, kv := range strings.Split(string(b), "\n") {
		if kv == "" || strings.HasPrefix(kv, "#") {
			continue
		}
		env = append(env, kv)
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "POSTINO_") {
			want = append(want, name)
		}
	}
	p := startProcess(t, buildBinary(t), t.TempDir(), nil, env)
	c, err := net.DialTimeout("tcp", p.smtp, time.Minute)
	if err != nil {
		t.Fatalf("the relay does not listen on %s: %v", p.smtp, err)
	}
	c.SetReadDeadline(time.Now().Add(time.Minute))
	greeting := make([]byte, 4)
	_, err = c.Read(greeting)
	c.Close()
	if err != nil || string(greeting) != "220 " {
		t.Errorf("greeting %q: %v", greeting, err)
	}
	log, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, "POSTINO_") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "Service named postino") {
		t.Fatalf("want one line naming the ignored variables, got %d:\n%s", len(lines), log)
	}
	_, listed, _ := strings.Cut(lines[0], " variables=")
	slices.Sort(want)
	if got := strings.Split(strings.TrimSpace(listed), ","); !slices.Equal(got, want) {
		t.Errorf("the line names\n%v\nwant\n%v", got, want)
	}
}
