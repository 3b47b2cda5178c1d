package dovecottest_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/internal/testrig/dovecottest"
)

func message(id, subject string) []byte {
	return fmt.Appendf(nil, "From: MAILER-DAEMON@example.test\r\nTo: bounces@example.test\r\n"+
		"Subject: %s\r\nMessage-ID: <%s>\r\nDate: Mon, 02 Jan 2006 15:04:05 +0000\r\n\r\nbody of %s\r\n", subject, id, id)
}

// login logs c in and checks the capabilities a bounce poller relies on, as
// the server announces them in answer to CAPABILITY.
func login(t *testing.T, s *dovecottest.Server, c *imapclient.Client) {
	t.Helper()
	t.Cleanup(func() { c.Close() })
	if err := c.Login(s.User, s.Password).Wait(); err != nil {
		t.Fatalf("login: %v\n%s", err, s.Log())
	}
	caps, err := c.Capability().Wait()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []imap.Cap{imap.CapIdle, imap.CapMove, imap.CapUIDPlus} {
		if !caps.Has(want) {
			t.Errorf("CAPABILITY lacks %s: %v", want, caps)
		}
	}
}

func TestPlain(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := dovecottest.Start(t, dovecottest.Options{})
	t.Logf("started in %v", time.Since(start))
	if s.TLSAddr != "" || s.CAFile != "" {
		t.Errorf("TLS without Options.TLS: %q %q", s.TLSAddr, s.CAFile)
	}

	c, err := imapclient.DialInsecure(s.Addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	login(t, s, c)
	if c.Caps().Has(imap.CapStartTLS) {
		t.Error("STARTTLS offered without Options.TLS")
	}

	if got := s.Messages(t, "INBOX"); len(got) != 0 {
		t.Errorf("new INBOX holds %d messages", len(got))
	}
	s.Append(t, "Bounces", message("one@example.test", "first"))
	s.Append(t, "Bounces", message("two@example.test", "second"))
	s.Append(t, "INBOX", message("three@example.test", "third"))
	msgs := s.Messages(t, "Bounces")
	if len(msgs) != 2 {
		t.Fatalf("Bounces holds %d messages, want 2", len(msgs))
	}
	for i, want := range []string{"<one@example.test>", "<two@example.test>"} {
		if got := msgs[i].Header("Message-ID"); got != want {
			t.Errorf("message %d: Message-ID %q, want %q", i, got, want)
		}
		if len(msgs[i].Flags) != 0 {
			t.Errorf("message %d: flags %v on a fresh message", i, msgs[i].Flags)
		}
	}
	if msgs[0].UID >= msgs[1].UID {
		t.Errorf("UIDs %d, %d not increasing", msgs[0].UID, msgs[1].UID)
	}

	// What a poller does: mark the first seen and move it away, on the
	// client logged in above.
	if _, err := c.Select("Bounces", nil).Wait(); err != nil {
		t.Fatal(err)
	}
	first := imap.UIDSetNum(imap.UID(msgs[0].UID))
	if err := c.Store(first, &imap.StoreFlags{Op: imap.StoreFlagsAdd, Flags: []imap.Flag{imap.FlagSeen}, Silent: true}, nil).Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Move(first, "Processed").Wait(); err == nil {
		t.Error("MOVE into a missing folder succeeded")
	}
	s.Append(t, "Processed", message("four@example.test", "fourth"))
	if _, err := c.Move(first, "Processed").Wait(); err != nil {
		t.Fatal(err)
	}
	left := s.Messages(t, "Bounces")
	if len(left) != 1 || left[0].Header("Subject") != "second" {
		t.Errorf("Bounces after MOVE: %v", left)
	}
	moved := s.Messages(t, "Processed")
	if len(moved) != 2 || moved[1].Header("Subject") != "first" || !slices.Contains(moved[1].Flags, `\Seen`) {
		t.Errorf("Processed after MOVE: %v", moved)
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	start := time.Now()
	s := dovecottest.Start(t, dovecottest.Options{TLS: true})
	t.Logf("started in %v", time.Since(start))

	// Trust only what CAFile holds, as a poller configured with it would.
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no certificate in %s", s.CAFile)
	}
	for _, name := range []string{"127.0.0.1", "localhost"} {
		opts := &imapclient.Options{TLSConfig: &tls.Config{RootCAs: pool, ServerName: name}}
		t.Run("STARTTLS "+name, func(t *testing.T) {
			c, err := imapclient.DialStartTLS(s.Addr, opts)
			if err != nil {
				t.Fatal(err)
			}
			login(t, s, c)
		})
		t.Run("IMAPS "+name, func(t *testing.T) {
			c, err := imapclient.DialTLS(s.TLSAddr, opts)
			if err != nil {
				t.Fatal(err)
			}
			login(t, s, c)
		})
	}
	t.Run("plain", func(t *testing.T) {
		c, err := imapclient.DialInsecure(s.Addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !c.Caps().Has(imap.CapStartTLS) {
			t.Error("STARTTLS not offered")
		}
		login(t, s, c)
	})
	t.Run("untrusted", func(t *testing.T) {
		c, err := imapclient.DialTLS(s.TLSAddr, &imapclient.Options{TLSConfig: &tls.Config{ServerName: "localhost"}})
		if err == nil {
			err = c.WaitGreeting()
			c.Close()
		}
		if err == nil {
			t.Error("IMAPS verified without the test CA")
		}
	})
}

func TestResetUIDValidity(t *testing.T) {
	t.Parallel()
	s := dovecottest.Start(t, dovecottest.Options{})
	s.Append(t, "Bounces", message("one@example.test", "first"))
	s.Append(t, "Bounces", message("two@example.test", "second"))

	// Pollers sitting in the folder, one of them idling.
	c := s.Client(t)
	sel, err := c.Select("Bounces", nil).Wait()
	if err != nil {
		t.Fatal(err)
	}
	idler := s.Client(t)
	if _, err := idler.Select("Bounces", nil).Wait(); err != nil {
		t.Fatal(err)
	}
	idle, err := idler.Idle()
	if err != nil {
		t.Fatal(err)
	}

	next := s.ResetUIDValidity(t, "Bounces")
	if next == sel.UIDValidity {
		t.Fatalf("UIDVALIDITY still %d", next)
	}
	if got := s.Messages(t, "Bounces"); len(got) != 2 {
		t.Errorf("%d messages after the reset, want 2", len(got))
	}
	again, err := s.Client(t).Select("Bounces", nil).Wait()
	if err != nil {
		t.Fatal(err)
	}
	if again.UIDValidity != next {
		t.Errorf("SELECT after the reset: UIDVALIDITY %d, want %d", again.UIDValidity, next)
	}
	// Dovecot ends the sessions that had the folder selected at their next
	// command, the idling one once it is done idling.
	if err := idle.Close(); err != nil {
		t.Fatal(err)
	}
	if err := idle.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*imapclient.Client{c, idler} {
		if err := c.Noop().Wait(); err == nil {
			t.Error("NOOP succeeded in a session that had the folder selected")
		}
		select {
		case <-c.Closed():
		case <-time.After(5 * time.Second):
			t.Error("a session that had the folder selected was not closed")
		}
	}
}

func TestRestart(t *testing.T) {
	t.Parallel()
	s := dovecottest.Start(t, dovecottest.Options{TLS: true})
	s.Append(t, "INBOX", message("one@example.test", "first"))
	c := s.Client(t)
	start := time.Now()
	s.Restart(t)
	t.Logf("restarted in %v", time.Since(start))
	select {
	case <-c.Closed():
	case <-time.After(5 * time.Second):
		t.Error("the session survived the restart")
	}
	if got := s.Messages(t, "INBOX"); len(got) != 1 {
		t.Errorf("%d messages after the restart, want 1", len(got))
	}
}

func TestParallelServers(t *testing.T) {
	t.Parallel()
	a := dovecottest.Start(t, dovecottest.Options{})
	b := dovecottest.Start(t, dovecottest.Options{})
	if a.Addr == b.Addr {
		t.Fatalf("both on %s", a.Addr)
	}
	a.Append(t, "INBOX", message("a@example.test", "a"))
	if got := b.Messages(t, "INBOX"); len(got) != 0 {
		t.Errorf("the second server sees %d messages of the first", len(got))
	}
}

// TestLMTP delivers into the user's INBOX as an MTA does, and sees that
// LMTP refuses a recipient the server has no user for.
func TestLMTP(t *testing.T) {
	t.Parallel()
	s := dovecottest.Start(t, dovecottest.Options{LMTP: true})
	conn, err := net.Dial("tcp", s.LMTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	c := smtp.NewClientLMTP(conn)
	defer c.Close()
	if err := c.Hello("mta.example.test"); err != nil {
		t.Fatal(err)
	}
	if err := c.Mail("", nil); err != nil {
		t.Fatal(err)
	}
	var se *smtp.SMTPError
	if err := c.Rcpt("nobody-here@example.test", nil); !errors.As(err, &se) || se.Code != 550 {
		t.Errorf("RCPT of an unknown user: %v, want 550", err)
	}
	if err := c.Rcpt(s.User, nil); err != nil {
		t.Fatalf("RCPT %s: %v\n%s", s.User, err, s.Log())
	}
	w, err := c.Data()
	if err != nil {
		t.Fatal(err)
	}
	w.Write(message("lmtp@example.test", "delivered"))
	if err := w.Close(); err != nil {
		t.Fatalf("DATA: %v\n%s", err, s.Log())
	}
	msgs := s.Messages(t, "INBOX")
	if len(msgs) != 1 || msgs[0].Header("Message-ID") != "<lmtp@example.test>" {
		t.Errorf("INBOX holds %d messages, want the one delivered", len(msgs))
	}
}
