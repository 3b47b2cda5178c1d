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

	"github.com/genropy/postino/internal/testrig/dkimtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay/dkim"
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

// signedMessage writes a message signed by the keys given (as keygen
// wrote them, each active), and returns its path and bytes.
func signedMessage(t *testing.T, keys ...dkim.KeySpec) (string, []byte) {
	t.Helper()
	ring, err := dkim.Load(dkim.DefaultPolicy(), keys)
	if err != nil {
		t.Fatal(err)
	}
	msg := "From: <app@example.com>\r\nTo: <user@example.net>\r\nSubject: before DNS\r\nDate: Mon, 02 Mar 2026 10:00:00 +0000\r\n" +
		"Message-ID: <eml-1@example.com>\r\n\r\nHello before the record is published.\r\n"
	res, err := dkim.NewSigner(ring, nil).Sign(strings.NewReader(msg), "")
	if err != nil || len(res.Signed) != len(keys) {
		t.Fatalf("sign: %+v, %v", res, err)
	}
	signed := []byte(res.Fields + msg)
	path := filepath.Join(t.TempDir(), "signed.eml")
	if err := os.WriteFile(path, signed, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, signed
}

// TestDKIMCheckEml verifies a message the relay's signer signed, with the
// key given as a record, a zone file line or a key file, before any DNS
// record exists, and with the published records; a tampered message and a
// wrong record fail.
func TestDKIMCheckEml(t *testing.T) {
	t.Setenv("POSTINO_CONFIG", "")
	dir := t.TempDir()
	rsaPath, rsaLine := keygen(t, dir, "example.com", "r1", "rsa")
	edPath, edLine := keygen(t, dir, "example.com", "e1", "ed25519")
	_, otherLine := keygen(t, dir, "example.com", "r2", "rsa")
	path, signed := signedMessage(t,
		dkim.KeySpec{Domain: "example.com", Selector: "r1", File: rsaPath, Active: true},
		dkim.KeySpec{Domain: "example.com", Selector: "e1", File: edPath, Active: true})
	_, rsaRecord, err := dkim.ParseRecord(rsaLine)
	if err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(t.TempDir(), "tampered.eml")
	if err := os.WriteFile(tampered, bytes.Replace(signed, []byte("Hello before"), []byte("Hello after"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	unsigned := filepath.Join(t.TempDir(), "unsigned.eml")
	if err := os.WriteFile(unsigned, []byte("From: <app@example.com>\r\nSubject: x\r\n\r\nbody\r\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dns := startDNS(t)
	dns.publish(t, rsaLine)
	dns.publish(t, edLine)

	const (
		rsaPass = "pass       d=example.com s=r1\n"
		edPass  = "pass       d=example.com s=e1\n"
	)
	tests := []struct {
		name string
		args []string
		code int
		want []string
	}{
		// A bare record answers for every signature: the RSA one verifies,
		// the Ed25519 one cannot with an RSA key.
		{"record", []string{"--eml", path, "--record", rsaRecord}, 0, []string{rsaPass, "d=example.com s=e1: dkim:"}},
		// A zone line answers for its own name only.
		{"zone line", []string{"--eml", path, "--record", rsaLine}, 0,
			[]string{rsaPass, "permerror  d=example.com s=e1: dkim: no key for signature", "the record given is for r1._domainkey.example.com"}},
		{"ed25519 zone line", []string{"--eml", path, "--record", edLine}, 0, []string{edPass, "permerror  d=example.com s=r1"}},
		{"key file", []string{"--eml", path, "--key", rsaPath}, 0, []string{rsaPass}},
		{"published", []string{"--eml", path, "--resolver", dns.addr}, 0, []string{rsaPass, edPass}},
		{"tampered", []string{"--eml", tampered, "--record", rsaLine}, 1,
			[]string{"fail       d=example.com s=r1: dkim: body hash did not verify", "none of the 2 DKIM signatures of " + tampered + " verifies"}},
		{"tampered, published", []string{"--eml", tampered, "--resolver", dns.addr}, 1, []string{"fail       d=example.com s=e1", "none of the 2"}},
		{"wrong record", []string{"--eml", path, "--record", strings.Replace(otherLine, "r2._domainkey", "r1._domainkey", 1)}, 1,
			[]string{"fail       d=example.com s=r1: dkim: signature did not verify", "none of the 2"}},
		{"wrong key", []string{"--eml", path, "--key", filepath.Join(dir, "example.com.r2.pem")}, 1, []string{"fail       d=example.com s=r1", "none of the 2"}},
		{"unsigned", []string{"--eml", unsigned, "--record", rsaRecord}, 1, []string{"has no DKIM-Signature field"}},
		{"not a record", []string{"--eml", path, "--record", "hello"}, 2, []string{`--record: "hello" is not a DKIM key record`, "usage: postino dkim check"}},
		{"record and key", []string{"--eml", path, "--record", rsaRecord, "--key", rsaPath}, 2, []string{"not both"}},
		{"eml and domain", []string{"--eml", path, "--domain", "example.com"}, 2, []string{"leave out --domain"}},
		{"record and resolver", []string{"--eml", path, "--record", rsaRecord, "--resolver", dns.addr}, 2, []string{"leave out --resolver"}},
		// Without --eml, --record checks a key against a record that is
		// not published yet.
		{"key against a record", []string{"--domain", "example.com", "--selector", "r1", "--key", rsaPath, "--record", rsaLine}, 0,
			[]string{"ok    r1._domainkey.example.com matches " + rsaPath}},
		{"key against a wrong record", []string{"--domain", "example.com", "--selector", "r1", "--key", rsaPath, "--record", otherLine}, 1,
			[]string{"FAIL  r1._domainkey.example.com: no TXT record", "the record given is for r2._domainkey.example.com"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := cli(t, append([]string{"dkim", "check"}, tt.args...)...)
			if code != tt.code {
				t.Errorf("exit %d, want %d:\n%s%s", code, tt.code, out, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out+errOut, w) {
					t.Errorf("output lacks %q:\n%s%s", w, out, errOut)
				}
			}
		})
	}
}
