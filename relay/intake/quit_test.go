package intake_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/textproto"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/relay/intake"
)

// runClient runs a real SMTP client program, bounded in time, and returns
// its exit code and what it printed. A test skips when the program is not
// installed.
func runClient(t *testing.T, stdin string, name string, args ...string) (int, string) {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not installed: %v", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		return exit.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	return 0, string(out)
}

// TestQuitAfterSTARTTLS: a client that says QUIT inside TLS gets its 221
// and a TLS close_notify, so that it knows its message went through.
func TestQuitAfterSTARTTLS(t *testing.T) {
	e := newEnv(t, func(c *intake.Config) { c.TLS = &tls.Config{} })
	host, port, _ := strings.Cut(e.addr, ":")

	t.Run("swaks", func(t *testing.T) {
		code, out := runClient(t, "", "swaks", "--server", host, "--port", port, "--tls",
			"--tls-ca-path", e.cert.CAFile, "--tls-verify",
			"--from", "app@example.com", "--to", "user@example.net", "--helo", "app.local",
			"--timeout", "20")
		if code != 0 || !strings.Contains(out, "<~  221 2.0.0") {
			t.Fatalf("swaks exited %d, want 0 with a 221 after QUIT:\n%s", code, out)
		}
	})

	t.Run("python smtplib", func(t *testing.T) {
		script := `
import smtplib, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[3])
s = smtplib.SMTP(sys.argv[1], int(sys.argv[2]), local_hostname="app.local", timeout=20)
s.starttls(context=ctx)
s.sendmail("app@example.com", ["user@example.net"], "From: app@example.com\r\nSubject: t\r\n\r\nhello\r\n")
code, text = s.quit()
print("quit", code, text.decode())
`
		code, out := runClient(t, "", "python3", "-c", script, "localhost", port, e.cert.CAFile)
		if code != 0 || !strings.Contains(out, "quit 221 2.0.0") {
			t.Fatalf("python3 exited %d, want 0 with quit() answered 221:\n%s", code, out)
		}
	})

	t.Run("openssl s_client", func(t *testing.T) {
		code, out := runClient(t, "EHLO app.local\r\nQUIT\r\n", "openssl", "s_client", "-starttls", "smtp",
			"-connect", e.addr, "-crlf", "-quiet", "-ign_eof",
			"-CAfile", e.cert.CAFile, "-servername", "localhost", "-verify_return_error")
		if code != 0 || !strings.Contains(out, "221 2.0.0") || strings.Contains(out, "unexpected eof") {
			t.Fatalf("openssl exited %d, want 0 with a 221 and a clean TLS end:\n%s", code, out)
		}
	})

	t.Run("the TLS connection ends with close_notify", func(t *testing.T) {
		r := dialEHLO(t, e.addr)
		r.send("STARTTLS\r\n")
		r.expect("220")
		tc := tls.Client(r.c, e.cert.ClientConfig())
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		r.c = tc
		r.r = textproto.NewReader(bufio.NewReader(tc))
		r.send("EHLO app.local\r\n")
		r.expect("250")
		r.send("QUIT\r\n")
		r.expect("221 2.0.0")
		// crypto/tls returns io.EOF only for a close_notify; a bare TCP
		// close is io.ErrUnexpectedEOF.
		if rest, err := io.ReadAll(tc); err != nil || len(rest) != 0 {
			t.Fatalf("after 221: read %q, %v; want a clean end of the TLS stream", rest, err)
		}
	})

	if n := e.count(t); n != 2 {
		t.Errorf("%d messages queued, want 2 (swaks and python)", n)
	}
}

// TestQuitPlain: without TLS the 221 is sent as before.
func TestQuitPlain(t *testing.T) {
	e := newEnv(t, nil)
	host, port, _ := strings.Cut(e.addr, ":")
	code, out := runClient(t, "", "swaks", "--server", host, "--port", port,
		"--from", "app@example.com", "--to", "user@example.net", "--helo", "app.local", "--timeout", "20")
	if code != 0 || !strings.Contains(out, "<-  221 2.0.0") {
		t.Fatalf("swaks exited %d, want 0 with a 221 after QUIT:\n%s", code, out)
	}
}
