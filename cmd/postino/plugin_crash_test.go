package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay/admin"
)

// TestPluginCrash kills the relay while a plugin holds an event: after the
// restart the event comes again, with the same id, and the plugin process of
// the dead relay is gone with it.
func TestPluginCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a relay process")
	}
	bin := buildBinary(t)
	plugin := buildTestPlugin(t)
	env := []string{"TESTPLUGIN_OUT=" + plugin.Out, "TESTPLUGIN_STATE=" + plugin.State}
	up := smtptest.Start(t, smtptest.Options{})
	data := t.TempDir()
	args := []string{"--smarthost", up.Addr, "--plugin", plugin.Path}
	p := startProcess(t, bin, data, args, append(env, "TESTPLUGIN_MODE=slow", "TESTPLUGIN_DELAY=30s"))

	c, err := smtp.Dial(p.smtp)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SendMail("app@example.com", []string{"user@example.net"}, strings.NewReader("From: app@example.com\r\nX-Genro-Mail-ID: plugin-crash\r\n\r\nx\r\n")); err != nil {
		t.Fatal(err)
	}
	c.Close()
	var first []map[string]any
	for deadline := time.Now().Add(20 * time.Second); len(first) == 0; {
		first = readEvents(t, plugin.Out)
		if time.Now().After(deadline) {
			t.Fatal("the plugin never got the event")
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.cmd.Wait()
	oldPID := int(first[0]["pid"].(float64))
	// The plugin sees its relay gone and exits on its own.
	for deadline := time.Now().Add(20 * time.Second); alive(oldPID); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("the plugin process %d outlived its relay by 20 s", oldPID)
			syscall.Kill(oldPID, syscall.SIGKILL)
			break
		}
	}

	p2 := startProcess(t, bin, data, args, append(env, "TESTPLUGIN_MODE=ok"))
	client := &admin.Client{Base: p2.admin}
	for deadline := time.Now().Add(20 * time.Second); ; {
		m, err := client.Get(t.Context(), "plugin-crash")
		if err == nil && m.Status == "SENT-ACKNOWLEDGED" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the restart: %+v %v", m, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	events := readEvents(t, plugin.Out)
	if len(events) != 2 || events[0]["event_id"] != events[1]["event_id"] {
		t.Errorf("the plugin got %v; want the same event twice", events)
	}
	if len(up.Messages()) != 1 {
		t.Errorf("the message was delivered %d times", len(up.Messages()))
	}
}

func readEvents(t *testing.T, path string) []map[string]any {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e map[string]any
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// alive reports whether a process runs: a zombie left to a parent that
// does not reap it does not count.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}
