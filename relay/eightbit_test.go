package relay_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emersion/go-message"
	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/internal/testrig/dkimtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/internal/testrig/testcert"
	"github.com/genropy/postino/relay"
)

// pySend is what Python's standard library does when an app sends mail:
// EmailMessage.set_content with an umlaut, an HTML alternative on one long
// line, then smtplib's send_message, over plain SMTP, STARTTLS, or STARTTLS
// and AUTH. It writes the bytes it sends to argv[4].
const pySend = `
import smtplib, ssl, sys
from email.message import EmailMessage
host, port, mode, out, msgid, ca, pw = sys.argv[1:8]
m = EmailMessage()
m['From'] = 'app@example.com'
m['To'] = 'user@example.net'
m['Subject'] = 'Grüße aus Köln'
m['X-Genro-Mail-ID'] = msgid
m.set_content('Grüße aus Köln,\nund schöne Tage.\n')
m.add_alternative('<html><body>' + ''.join('<p>Grüße %d</p>' % i for i in range(200)) + '</body></html>\n', subtype='html', cte='8bit')
open(out, 'wb').write(m.as_bytes(policy=m.policy.clone(linesep='\r\n')))
s = smtplib.SMTP(host, int(port))
if mode != 'plain':
    s.starttls(context=ssl.create_default_context(cafile=ca))
if mode == 'auth':
    s.login('app', open(pw).read())
s.send_message(m)
s.quit()
`

// TestWhatAppsSendDelivered sends 8-bit mail without BODY=8BITMIME, and
// body lines over 998 octets, with the clients apps use (Python's smtplib,
// msmtp, swaks), through a signing relay to an upstream with 8BITMIME and to
// one without; each delivered message is verified by dkimpy and go-msgauth,
// and its text after MIME decoding is what the app sent.
func TestWhatAppsSendDelivered(t *testing.T) {
	for _, tool := range []string{"swaks", "msmtp"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is missing: make test installs it (.ci/deps)", tool)
			}
			t.Skipf("%s is missing: apt-get install -y %s", tool, tool)
		}
	}
	for _, up := range []struct {
		name   string
		no8bit bool
	}{{"upstream with 8BITMIME", false}, {"upstream without 8BITMIME", true}} {
		t.Run(up.name, func(t *testing.T) {
			dir := t.TempDir()
			key, name, rec := dkimKey(t, dir, "example.com", "s2026", "rsa", true)
			records := dkimtest.Records{name: rec}
			upstream := smtptest.Start(t, smtptest.Options{No8BITMIME: up.no8bit})
			cfg, _ := testConfig(t)
			cfg.Routes.Default.Smarthost = upstream.Addr
			cfg.DKIM.Keys = []relay.DKIMKey{key}
			cert := testcert.New(t)
			cfg.SMTP.TLS = relay.TLSConfig{CertFile: cert.CertFile, KeyFile: cert.KeyFile}
			pw := filepath.Join(dir, "password")
			if err := os.WriteFile(pw, []byte("s3cret-app"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg.SMTP.Auth.Accounts = []relay.Account{{Username: "app", PasswordFile: pw}}
			rl := start(t, cfg)
			c := &appClients{t: t, dir: dir, addr: rl.r.SMTPAddr().String(), ca: cert.CAFile, pw: pw}

			sent := map[string][]byte{} // by X-Genro-Mail-ID, what the app sent
			for _, mode := range []string{"plain", "starttls", "auth"} {
				sent["py-"+mode] = c.python(mode, "py-"+mode)
			}
			sent["msmtp"] = c.msmtp("msmtp")
			sent["swaks"] = c.swaks("swaks")

			for id, msg := range sent {
				t.Run(id, func(t *testing.T) {
					got := receivedByUpstream(t, upstream, id)
					waitStatus(t, rl.client, id, "SENT-ACKNOWLEDGED")
					dkimtest.Verify(t, got.Data, records)
					checkDelivered(t, got, up.no8bit)
					want, have := decodedTexts(t, msg), decodedTexts(t, got.Data)
					if id == "swaks" {
						// swaks adds empty lines of its own after --body.
						want[0], have[0] = strings.TrimRight(want[0], "\n"), strings.TrimRight(have[0], "\n")
					}
					if fmt.Sprintf("%q", want) != fmt.Sprintf("%q", have) {
						t.Errorf("the text after MIME decoding differs:\nsent %q\ngot  %q", want, have)
					}
				})
			}
		})
	}
}

// checkDelivered checks what the upstream got: lines of at most 998
// octets, and 7-bit text when it did not offer 8BITMIME.
func checkDelivered(t *testing.T, got smtptest.Message, sevenBit bool) {
	t.Helper()
	eightBit := bytes.ContainsFunc(got.Data, func(r rune) bool { return r > 127 })
	switch {
	case sevenBit && (eightBit || got.Opts.Body != ""):
		t.Errorf("a 7-bit upstream got BODY=%q and 8-bit octets %v", got.Opts.Body, eightBit)
	case !sevenBit && eightBit && got.Opts.Body != "8BITMIME":
		t.Errorf("8-bit mail went without BODY=8BITMIME (BODY=%q)", got.Opts.Body)
	}
	for i, line := range bytes.Split(got.Data, []byte("\r\n")) {
		if len(line) > 998 {
			t.Errorf("line %d is %d octets long", i+1, len(line))
		}
	}
}

// decodedTexts is the text of each leaf part of msg, decoded as a reader
// does (go-message, charsets included), with LF line ends.
func decodedTexts(t *testing.T, msg []byte) []string {
	t.Helper()
	e, err := message.Read(bytes.NewReader(msg))
	if err != nil && !message.IsUnknownCharset(err) {
		t.Fatal(err)
	}
	var texts []string
	err = e.Walk(func(_ []int, part *message.Entity, err error) error {
		if err != nil && !message.IsUnknownCharset(err) {
			return err
		}
		if part.MultipartReader() != nil {
			return nil
		}
		b, err := io.ReadAll(part.Body)
		texts = append(texts, strings.ReplaceAll(string(b), "\r\n", "\n"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return texts
}

// appClients runs the clients apps use against the relay at addr.
type appClients struct {
	t                 *testing.T
	dir, addr, ca, pw string
}

func (c *appClients) run(name string, stdin io.Reader, args ...string) {
	c.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdin = stdin
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("%s failed (%v):\n%s", name, err, out)
	}
}

func (c *appClients) hostPort() (string, string) {
	host, port, _ := strings.Cut(c.addr, ":")
	return host, port
}

func (c *appClients) python(mode, id string) []byte {
	c.t.Helper()
	host, port := c.hostPort()
	out := filepath.Join(c.dir, id+".eml")
	c.run("/usr/bin/python3", nil, "-c", pySend, host, port, mode, out, id, c.ca, c.pw)
	b, err := os.ReadFile(out)
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}

// msmtp sends as the usual sendmail replacement does, over STARTTLS with
// AUTH: it has no way to say BODY=8BITMIME. The message is a script's, with
// LF line ends and no MIME header.
func (c *appClients) msmtp(id string) []byte {
	c.t.Helper()
	host, port := c.hostPort()
	conf := filepath.Join(c.dir, "msmtprc")
	rc := fmt.Sprintf("account default\nhost %s\nport %s\nfrom app@example.com\ntls on\ntls_starttls on\n"+
		"tls_trust_file %s\nauth plain\nuser app\npasswordeval cat %s\n", host, port, c.ca, c.pw)
	if err := os.WriteFile(conf, []byte(rc), 0o600); err != nil {
		c.t.Fatal(err)
	}
	msg := "From: app@example.com\nTo: user@example.net\nSubject: report\nX-Genro-Mail-ID: " + id +
		"\n\nGrüße aus Köln.\n" + strings.Repeat("Straße ", 300) + "\n"
	c.run("msmtp", strings.NewReader(msg), "-C", conf, "user@example.net")
	return []byte(msg)
}

// swaks sends --body 'Grüße…' with a line of 2,400 octets, over STARTTLS
// with AUTH.
func (c *appClients) swaks(id string) []byte {
	c.t.Helper()
	body := "Grüße " + strings.Repeat("0123456789", 240)
	c.run("swaks", nil, "--server", c.addr, "--from", "app@example.com", "--to", "user@example.net",
		"--header", "X-Genro-Mail-ID: "+id, "--body", body, "--tls", "--auth", "PLAIN",
		"--auth-user", "app", "--auth-password", "s3cret-app", "--silent", "2")
	return []byte("From: app@example.com\r\n\r\n" + body + "\r\n")
}

// TestEightBitHeaderToSevenBitUpstream: 8-bit octets in a header, sent
// without SMTPUTF8, cannot be made 7-bit: to an upstream without 8BITMIME
// the message fails with 5.6.3 and says why, and nothing is sent.
func TestEightBitHeaderToSevenBitUpstream(t *testing.T) {
	upstream := smtptest.Start(t, smtptest.Options{No8BITMIME: true})
	cfg, _ := testConfig(t)
	cfg.Routes.Default.Smarthost = upstream.Addr
	rl := start(t, cfg)
	c, err := smtp.Dial(rl.r.SMTPAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SendMail("app@example.com", []string{"user@example.net"},
		strings.NewReader("From: app@example.com\r\nX-Genro-Mail-ID: hdr8\r\nSubject: Grüße\r\n\r\nGrüße\r\n")); err != nil {
		t.Fatal(err)
	}
	m := waitStatus(t, rl.client, "hdr8", "FAILED-ACKNOWLEDGED")
	if r := m.Recipients[0]; r.EnhancedCode != "5.6.3" || !strings.Contains(r.Text, "a header holds 8-bit octets") {
		t.Errorf("recipient %+v, want 5.6.3 saying the header holds 8-bit octets", r)
	}
	if n := len(upstream.Messages()); n != 0 {
		t.Errorf("the upstream got %d messages", n)
	}
}
