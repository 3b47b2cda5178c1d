package intake

import (
	"bufio"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// replyListener hands go-smtp connections that hold replies back until the
// server next reads. go-smtp writes each line of a reply on its own, so an
// EHLO answer would cost one system call and one TCP segment per extension,
// and the client would be woken for each. writeTimeout bounds the sending
// of the last reply at close (none when zero).
type replyListener struct {
	net.Listener
	writeTimeout time.Duration
}

func (l replyListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &replyConn{Conn: c, writeTimeout: l.writeTimeout}, nil
}

// replyConn buffers writes and sends them before each read: in SMTP the
// server speaks only in answer to the client, so whatever it wrote is due
// by the time it waits for the client again.
type replyConn struct {
	net.Conn
	writeTimeout time.Duration
	mu           sync.Mutex
	w            *bufio.Writer // allocated at the first write
	// hungUp makes reads end, once the replies held are sent.
	hungUp atomic.Bool
}

func (c *replyConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w == nil {
		c.w = bufio.NewWriterSize(c.Conn, 2048)
	}
	return c.w.Write(p)
}

// flush sends what is held; a failure to send is the connection's failure,
// reported to the reader.
func (c *replyConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.w == nil || c.w.Buffered() == 0 {
		return nil
	}
	return c.w.Flush()
}

func (c *replyConn) Read(p []byte) (int, error) {
	if err := c.flush(); err != nil {
		return 0, err
	}
	if c.hungUp.Load() {
		return 0, io.EOF
	}
	return c.Conn.Read(p)
}

// hangUp ends the session at its next read, as if the client had left:
// the server said its last reply, and go-smtp has no other way to be told.
func (c *replyConn) hangUp() { c.hungUp.Store(true) }

// Close sends the last reply (a 221 or 421) first. When another goroutine
// is writing, the close is an abort and nothing waits for it.
//
// The sending gets a deadline of its own: a TLS connection's Close writes
// its close_notify (into the buffer, after the 221) and then sets the
// write deadline to now, to fail any later write, before it closes this
// connection. Under that deadline the held bytes would be dropped, and the
// client would see the connection cut instead of its 221.
func (c *replyConn) Close() error {
	if c.mu.TryLock() {
		if c.w != nil && c.w.Buffered() > 0 {
			var deadline time.Time
			if c.writeTimeout > 0 {
				deadline = time.Now().Add(c.writeTimeout)
			}
			c.Conn.SetWriteDeadline(deadline)
			c.w.Flush()
		}
		c.mu.Unlock()
	}
	return c.Conn.Close()
}
