package relay_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/internal/testrig/dkimtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay"
	"github.com/genropy/postino/relay/dkim"
)

// dkimKey writes a new key for domain and returns its configuration and
// the record that publishes it.
func dkimKey(t *testing.T, dir, domain, selector, algorithm string, active bool) (relay.DKIMKey, string, string) {
	t.Helper()
	k, err := dkim.GenerateKey(algorithm, 0)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, selector+"."+domain+".pem")
	if err := dkim.WriteKey(path, k); err != nil {
		t.Fatal(err)
	}
	rec, _ := dkim.Record(k)
	return relay.DKIMKey{Domain: domain, Selector: selector, KeyFile: path, Active: &active}, dkim.RecordName(domain, selector), rec
}

// sendRaw submits a message as it is, SMTPUTF8 when it needs it, and
// returns the id it was queued as.
func sendRaw(t *testing.T, addr, from string, to []string, msg []byte) string {
	t.Helper()
	c, err := smtp.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	utf8 := bytes.ContainsFunc(msg, func(r rune) bool { return r > 127 })
	opts := &smtp.MailOptions{UTF8: utf8}
	if utf8 {
		opts.Body = smtp.Body8BitMIME
	}
	if err := c.Mail(from, opts); err != nil {
		t.Fatal(err)
	}
	for _, r := range to {
		if err := c.Rcpt(r, nil); err != nil {
			t.Fatal(err)
		}
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	w.Write(msg)
	resp, err := w.CloseWithResponse()
	if err != nil {
		t.Fatal(err)
	}
	_, id, _ := strings.Cut(resp.StatusText, "queued as ")
	return id
}

// received waits for the upstream to hold the message whose
// X-Genro-Mail-ID is id.
func receivedByUpstream(t *testing.T, up *smtptest.Server, id string) smtptest.Message {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range up.Messages() {
			if m.Header("X-Genro-Mail-ID") == id {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the upstream did not receive %s", id)
	return smtptest.Message{}
}

// TestDKIMThroughRelay sends the signing fixtures through the relay and
// verifies them as the upstream received them, after dot-stuffing, CRLF
// and the relay's own Received field.
func TestDKIMThroughRelay(t *testing.T) {
	dir := t.TempDir()
	rsaKey, rsaName, rsaRec := dkimKey(t, dir, "example.com", "r2026", "rsa", true)
	edKey, edName, edRec := dkimKey(t, dir, "example.com", "e2026", "ed25519", true)
	records := dkimtest.Records{rsaName: rsaRec, edName: edRec}
	cfg, up := testConfig(t)
	cfg.DKIM.Keys = []relay.DKIMKey{rsaKey, edKey}
	rl := start(t, cfg)
	sent := 0
	for _, f := range []string{"plain.eml", "utf8.eml", "multipart.eml", "dots.eml", "long-lines.eml"} {
		t.Run(f, func(t *testing.T) {
			sent++
			msg, err := os.ReadFile(filepath.Join("dkim", "testdata", f))
			if err != nil {
				t.Fatal(err)
			}
			id := strings.TrimSpace(strings.SplitN(strings.SplitN(string(msg), "X-Genro-Mail-ID: ", 2)[1], "\r\n", 2)[0])
			sendRaw(t, rl.r.SMTPAddr().String(), "app@example.com", []string{"user@example.net"}, msg)
			got := receivedByUpstream(t, up, id)
			if n := bytes.Count(got.Data, []byte("DKIM-Signature:")); n != 2 {
				t.Fatalf("%d signatures, want RSA and Ed25519", n)
			}
			dkimtest.Verify(t, got.Data, records)
			m := waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
			if !strings.Contains(m.Reason, "DKIM-signed d=example.com s=r2026 (rsa-sha256), s=e2026 (ed25519-sha256)") {
				t.Errorf("reason %q", m.Reason)
			}
			// Tampering after the relay breaks both signatures.
			dkimtest.Fails(t, bytes.Replace(got.Data, []byte("\r\n\r\n"), []byte("\r\nFrom: <ceo@example.com>\r\n\r\n"), 1), records)
		})
	}
	body := scrape(t, rl)
	for _, want := range []string{fmt.Sprintf(`postino_dkim_signatures_total{algorithm="rsa",domain="example.com"} %d`, sent),
		fmt.Sprintf(`postino_dkim_signatures_total{algorithm="ed25519",domain="example.com"} %d`, sent)} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, grep(body, "dkim"))
		}
	}
}

func TestDKIMDomains(t *testing.T) {
	dir := t.TempDir()
	key, name, rec := dkimKey(t, dir, "example.com", "s1", "ed25519", true)
	records := dkimtest.Records{name: rec}
	for _, tt := range []struct {
		name     string
		from     string
		route    string // the sender route's dkim_domain
		required bool
		status   string
		reason   string
		signed   bool
	}{
		{"From's domain", "app@example.com", "", false, "SENT-ACKNOWLEDGED", "DKIM-signed d=example.com s=s1", true},
		{"no key: unsigned, and said", "app@example.net", "", false, "SENT-ACKNOWLEDGED", "not DKIM-signed: no key for example.net", false},
		{"no key, required: failed", "app@example.net", "", true, "FAILED-ACKNOWLEDGED", "no DKIM key for the signing domain \"example.net\", and dkim.required is set", false},
		{"the route names the parent domain", "news@mail.example.com", "example.com", true, "SENT-ACKNOWLEDGED", "DKIM-signed d=example.com s=s1", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, up := testConfig(t)
			cfg.DKIM.Keys = []relay.DKIMKey{key}
			cfg.DKIM.Required = tt.required
			if tt.route != "" {
				cfg.Routes.Senders = []relay.RouteConfig{{Name: "news", Match: relay.MatchConfig{Domain: "mail.example.com"},
					Smarthost: up.Addr, DKIMDomain: tt.route}}
			}
			rl := start(t, cfg)
			msg := "From: <" + tt.from + ">\r\nTo: <user@example.net>\r\nSubject: domains\r\nX-Genro-Mail-ID: dom-1\r\n\r\nhello\r\n"
			sendRaw(t, rl.r.SMTPAddr().String(), tt.from, []string{"user@example.net"}, []byte(msg))
			m := waitStatus(t, rl.client, "dom-1", tt.status)
			if !strings.Contains(m.Reason, tt.reason) {
				t.Errorf("reason %q, want %q", m.Reason, tt.reason)
			}
			if tt.status == "FAILED-ACKNOWLEDGED" {
				if r := recipient(m, "user@example.net"); r.Code != 550 || r.EnhancedCode != "5.7.0" {
					t.Errorf("recipient %+v", r)
				}
				if len(up.Messages()) != 0 {
					t.Error("an unsigned message left although dkim.required is set")
				}
				return
			}
			got := receivedByUpstream(t, up, "dom-1")
			if tt.signed {
				dkimtest.Verify(t, got.Data, records)
			} else if bytes.Contains(got.Data, []byte("DKIM-Signature")) {
				t.Error("signed without a key")
			}
		})
	}
}

func TestDKIMReload(t *testing.T) {
	dir := t.TempDir()
	oldKey, oldName, oldRec := dkimKey(t, dir, "example.com", "old", "rsa", true)
	newKey, newName, newRec := dkimKey(t, dir, "example.com", "new", "rsa", false)
	records := dkimtest.Records{oldName: oldRec, newName: newRec}
	cfg, up := testConfig(t)
	cfg.DKIM.Keys = []relay.DKIMKey{oldKey, newKey}
	rl := start(t, cfg)
	send := func(id string) string {
		msg := "From: <app@example.com>\r\nTo: <user@example.net>\r\nSubject: rotation\r\nX-Genro-Mail-ID: " + id + "\r\n\r\nhello\r\n"
		sendRaw(t, rl.r.SMTPAddr().String(), "app@example.com", []string{"user@example.net"}, []byte(msg))
		got := receivedByUpstream(t, up, id)
		dkimtest.Verify(t, got.Data, records)
		_, after, _ := strings.Cut(string(got.Data), " s=")
		sel, _, _ := strings.Cut(after, ";")
		return sel
	}
	if sel := send("before"); sel != "old" {
		t.Errorf("signed with %s before the rotation", sel)
	}

	// Rotation: the new key becomes the active one, no restart.
	yes, no := true, false
	cfg.DKIM.Keys[0].Active, cfg.DKIM.Keys[1].Active = &no, &yes
	if err := rl.r.ReloadDKIM(cfg.DKIM); err != nil {
		t.Fatal(err)
	}
	if sel := send("after"); sel != "new" {
		t.Errorf("signed with %s after the rotation", sel)
	}

	// A broken key file stops the reload; the keys in use stay.
	broken := filepath.Join(dir, "broken.pem")
	os.WriteFile(broken, []byte("-----BEGIN PRIVATE KEY-----\nbroken\n-----END PRIVATE KEY-----\n"), 0o600)
	bad := cfg.DKIM
	bad.Keys = append(bad.Keys[:1:1], relay.DKIMKey{Domain: "example.com", Selector: "broken", KeyFile: broken})
	if err := rl.r.ReloadDKIM(bad); err == nil || !strings.Contains(err.Error(), broken) || !strings.Contains(err.Error(), "those in use stay") {
		t.Errorf("reload with a broken key: %v", err)
	}
	if sel := send("still"); sel != "new" {
		t.Errorf("signed with %s after a failed reload", sel)
	}
}

func TestDKIMBadKeyStopsStart(t *testing.T) {
	dir := t.TempDir()
	key, _, _ := dkimKey(t, dir, "example.com", "s1", "ed25519", true)
	os.Chmod(key.KeyFile, 0o644)
	cfg, _ := testConfig(t)
	cfg.DKIM.Keys = []relay.DKIMKey{key}
	if _, err := relay.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), key.KeyFile) || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("start with a world-readable key: %v", err)
	}
}
