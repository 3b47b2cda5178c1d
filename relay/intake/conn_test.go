package intake

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// recordConn is a client's side seen from the server: it records each
// write the server makes and has a request waiting to be read.
type recordConn struct {
	net.Conn
	writes   []string
	writeErr error
	input    string
	closed   bool
	deadline time.Time
}

func (c *recordConn) SetWriteDeadline(t time.Time) error {
	c.deadline = t
	return nil
}

func (c *recordConn) Write(p []byte) (int, error) {
	if c.writeErr != nil {
		return 0, c.writeErr
	}
	if !c.deadline.IsZero() && !time.Now().Before(c.deadline) {
		return 0, os.ErrDeadlineExceeded
	}
	c.writes = append(c.writes, string(p))
	return len(p), nil
}

func (c *recordConn) Read(p []byte) (int, error) {
	n := copy(p, c.input)
	c.input = c.input[n:]
	return n, nil
}

func (c *recordConn) Close() error {
	c.closed = true
	return nil
}

func TestReplyConn(t *testing.T) {
	ehlo := []string{"250-relay.test\r\n", "250-PIPELINING\r\n", "250 SMTPUTF8\r\n"}
	tests := []struct {
		name string
		run  func(t *testing.T, c *replyConn, under *recordConn)
	}{
		{"a reply of several lines leaves in one write, before the next read", func(t *testing.T, c *replyConn, under *recordConn) {
			for _, line := range ehlo {
				if _, err := c.Write([]byte(line)); err != nil {
					t.Fatal(err)
				}
			}
			if len(under.writes) != 0 {
				t.Fatalf("written before the server reads: %q", under.writes)
			}
			buf := make([]byte, 64)
			n, err := c.Read(buf)
			if err != nil || string(buf[:n]) != "MAIL FROM:<a@example.com>\r\n" {
				t.Fatalf("read %q, %v", buf[:n], err)
			}
			if want := []string{strings.Join(ehlo, "")}; len(under.writes) != 1 || under.writes[0] != want[0] {
				t.Fatalf("writes %q, want %q", under.writes, want)
			}
		}},
		{"nothing held, nothing written", func(t *testing.T, c *replyConn, under *recordConn) {
			c.Read(make([]byte, 64))
			if len(under.writes) != 0 {
				t.Fatalf("writes %q", under.writes)
			}
		}},
		{"the last reply is sent at close", func(t *testing.T, c *replyConn, under *recordConn) {
			c.Write([]byte("221 2.0.0 Bye\r\n"))
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if len(under.writes) != 1 || under.writes[0] != "221 2.0.0 Bye\r\n" || !under.closed {
				t.Fatalf("writes %q, closed %v", under.writes, under.closed)
			}
		}},
		{"the last reply is sent at close after a deadline that has passed", func(t *testing.T, c *replyConn, under *recordConn) {
			// What a TLS connection's Close does: close_notify, then a
			// deadline of now, then the close of this connection.
			c.Write([]byte("221 2.0.0 Bye\r\n"))
			c.Write([]byte("close_notify"))
			c.SetWriteDeadline(time.Now())
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(under.writes, ""); got != "221 2.0.0 Bye\r\nclose_notify" || !under.closed {
				t.Fatalf("writes %q, closed %v", under.writes, under.closed)
			}
		}},
		{"a reply that cannot be sent fails the read", func(t *testing.T, c *replyConn, under *recordConn) {
			under.writeErr = net.ErrClosed
			c.Write([]byte("250 2.0.0 Ok\r\n"))
			if _, err := c.Read(make([]byte, 64)); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("read error %v, want %v", err, net.ErrClosed)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			under := &recordConn{input: "MAIL FROM:<a@example.com>\r\n"}
			tt.run(t, &replyConn{Conn: under, writeTimeout: time.Minute}, under)
		})
	}
}
