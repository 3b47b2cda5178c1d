package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/emersion/go-smtp"
	"golang.org/x/net/dns/dnsmessage"

	"github.com/genropy/postino/internal/dkimtest"
	"github.com/genropy/postino/internal/smtptest"
)

// dnsStub is a DNS server on loopback that answers TXT questions from its
// records, each a list of strings as a zone file line gives them.
type dnsStub struct {
	addr    string
	mu      sync.Mutex
	records map[string][]string
}

func startDNS(t *testing.T) *dnsStub {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	s := &dnsStub{addr: pc.LocalAddr().String(), records: map[string][]string{}}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if b, err := s.answer(buf[:n]); err == nil {
				pc.WriteTo(b, from)
			}
		}
	}()
	return s
}

func (s *dnsStub) answer(query []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(query)
	if err != nil {
		return nil, err
	}
	q, err := p.Question()
	if err != nil {
		return nil, err
	}
	resp := dnsmessage.Message{Header: dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true}, Questions: []dnsmessage.Question{q}}
	s.mu.Lock()
	txts, ok := s.records[strings.TrimSuffix(q.Name.String(), ".")]
	s.mu.Unlock()
	switch {
	case !ok:
		resp.RCode = dnsmessage.RCodeNameError
	case q.Type == dnsmessage.TypeTXT:
		resp.Answers = []dnsmessage.Resource{{
			Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeTXT, Class: dnsmessage.ClassINET, TTL: 60},
			Body:   &dnsmessage.TXTResource{TXT: txts},
		}}
	}
	return resp.Pack()
}

// publish serves a zone file line as keygen printed it.
func (s *dnsStub) publish(t *testing.T, line string) {
	t.Helper()
	name, value, ok := strings.Cut(strings.TrimSpace(line), ". IN TXT ")
	if !ok {
		t.Fatalf("not a zone file line: %q", line)
	}
	var strs []string
	for _, part := range strings.Split(value, `" "`) {
		strs = append(strs, strings.Trim(part, `"`))
	}
	s.mu.Lock()
	s.records[name] = strs
	s.mu.Unlock()
}

// records is what the stub serves, for the verifiers.
func (s *dnsStub) recordsForVerify() dkimtest.Records {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := dkimtest.Records{}
	for name, strs := range s.records {
		r[name] = strings.Join(strs, "")
	}
	return r
}

func keygen(t *testing.T, dir, domain, selector, algorithm string) (path, zoneLine string) {
	t.Helper()
	out, errOut, code := cli(t, "dkim", "keygen", "--domain", domain, "--selector", selector, "--algorithm", algorithm, "--out", dir)
	if code != 0 {
		t.Fatalf("keygen exit %d: %s", code, errOut)
	}
	return filepath.Join(dir, domain+"."+selector+".pem"), out
}

func TestDKIMKeygenAndCheck(t *testing.T) {
	dir := t.TempDir()
	dns := startDNS(t)
	for _, alg := range []string{"rsa", "ed25519"} {
		t.Run(alg, func(t *testing.T) {
			sel := alg + "2026"
			path, line := keygen(t, dir, "example.com", sel, alg)
			if strings.Count(line, "\n") != 1 || !strings.HasPrefix(line, sel+"._domainkey.example.com. IN TXT \"v=DKIM1; k="+alg+"; p=") {
				t.Errorf("keygen printed %q", line)
			}
			if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("key file: %v %v", st.Mode(), err)
			}
			if _, errOut, code := cli(t, "dkim", "keygen", "--domain", "example.com", "--selector", sel, "--algorithm", alg, "--out", dir); code != 1 || !strings.Contains(errOut, "never overwritten") {
				t.Errorf("second keygen exit %d: %s", code, errOut)
			}

			check := func(args ...string) (string, int) {
				out, errOut, code := cli(t, append([]string{"dkim", "check", "--domain", "example.com", "--selector", sel, "--resolver", dns.addr}, args...)...)
				return out + errOut, code
			}
			if out, code := check("--key", path); code != 1 || !strings.Contains(out, "no TXT record") || !strings.Contains(out, strings.TrimSpace(line)) {
				t.Errorf("check before publishing: exit %d: %s", code, out)
			}
			dns.publish(t, line)
			if out, code := check("--key", path); code != 0 || !strings.Contains(out, "ok    "+sel+"._domainkey.example.com matches "+path) {
				t.Errorf("check of the published key: exit %d: %s", code, out)
			}
			// The configured keys are found the same way: --dkim, as serve takes it.
			if out, code := check("--dkim", "example.com="+sel+":"+path); code != 0 || !strings.Contains(out, "ok ") {
				t.Errorf("check of a configured key: exit %d: %s", code, out)
			}
			_, other := keygen(t, dir, "example.com", sel+"x", alg)
			dns.publish(t, strings.Replace(other, sel+"x._domainkey", sel+"._domainkey", 1))
			if out, code := check("--key", path); code != 1 || !strings.Contains(out, "does not match") {
				t.Errorf("check against another key's record: exit %d: %s", code, out)
			}
		})
	}
	if _, errOut, code := cli(t, "dkim", "keygen", "--domain", "example.com", "--selector", "x", "--algorithm", "dsa", "--out", dir); code != 1 || !strings.Contains(errOut, "use rsa or ed25519") {
		t.Errorf("keygen dsa exit %d: %s", code, errOut)
	}
	if _, errOut, code := cli(t, "dkim", "keygen", "--domain", "example.com"); code != 2 || !strings.Contains(errOut, "--selector and --out") {
		t.Errorf("keygen without selector exit %d: %s", code, errOut)
	}
}

// TestDKIMSighup rotates the active key of a running relay with SIGHUP,
// then gives it a broken key and sees the keys in use stay.
func TestDKIMSighup(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	dns := startDNS(t)
	oldPath, oldLine := keygen(t, dir, "example.com", "old", "rsa")
	newPath, newLine := keygen(t, dir, "example.com", "new", "ed25519")
	dns.publish(t, oldLine)
	dns.publish(t, newLine)
	up := smtptest.Start(t, smtptest.Options{})
	config := filepath.Join(dir, "postino.yaml")
	writeConfig := func(oldActive, newActive bool, extra string) {
		yaml := fmt.Sprintf(`dkim:
  keys:
    - {domain: example.com, selector: old, key_file: %s, active: %t}
    - {domain: example.com, selector: new, key_file: %s, active: %t}
%s`, oldPath, oldActive, newPath, newActive, extra)
		if err := os.WriteFile(config, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeConfig(true, false, "")
	p := startProcess(t, bin, t.TempDir(), []string{"--config", config, "--smarthost", up.Addr}, nil)

	send := func(id string) string {
		c, err := smtp.Dial(p.smtp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		msg := "From: <app@example.com>\r\nTo: <user@example.net>\r\nSubject: rotation\r\nX-Genro-Mail-ID: " + id + "\r\n\r\nhello\r\n"
		if err := c.SendMail("app@example.com", []string{"user@example.net"}, strings.NewReader(msg)); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			for _, m := range up.Messages() {
				if m.Header("X-Genro-Mail-ID") == id {
					dkimtest.Verify(t, m.Data, dns.recordsForVerify())
					_, after, _ := strings.Cut(string(m.Data), " s=")
					sel, _, _ := strings.Cut(after, ";")
					return sel
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("%s was not delivered", id)
		return ""
	}
	hup := func(want string) {
		t.Helper()
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			log, _ := os.ReadFile(p.logPath)
			if bytes.Count(log, []byte("SIGHUP")) > 0 && strings.Contains(string(log), want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log after SIGHUP:\n%s", want, log)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	if sel := send("before"); sel != "old" {
		t.Errorf("signed with %q before the rotation", sel)
	}
	writeConfig(false, true, "")
	hup("DKIM keys reloaded")
	if sel := send("after"); sel != "new" {
		t.Errorf("signed with %q after the rotation", sel)
	}
	os.Chmod(newPath, 0o644)
	hup("reload failed")
	if log, _ := os.ReadFile(p.logPath); !strings.Contains(string(log), newPath) {
		t.Errorf("the failed reload does not name %s:\n%s", newPath, log)
	}
	if sel := send("kept"); sel != "new" {
		t.Errorf("signed with %q after a failed reload", sel)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve ended with %v", err)
		}
	case <-ctx.Done():
		t.Error("serve did not stop on SIGTERM")
	}
}
