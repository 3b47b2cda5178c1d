package delivery

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-sasl"

	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay/bounce"
)

// Timeouts bound every network step of a delivery. The defaults are those
// of RFC 5321 section 4.5.3.2, and 30 seconds to connect.
type Timeouts struct {
	Connect   time.Duration
	Greeting  time.Duration
	Command   time.Duration // EHLO, STARTTLS, AUTH, MAIL, RCPT, RSET, QUIT
	DataInit  time.Duration // the 354 to DATA
	DataBlock time.Duration // each write of the content
	DataEnd   time.Duration // the reply to the final dot
}

// DefaultTimeouts are RFC 5321's.
func DefaultTimeouts() Timeouts {
	return Timeouts{
		Connect:   30 * time.Second,
		Greeting:  5 * time.Minute,
		Command:   5 * time.Minute,
		DataInit:  2 * time.Minute,
		DataBlock: 3 * time.Minute,
		DataEnd:   10 * time.Minute,
	}
}

// Reply is an SMTP reply, or the relay's own verdict in the same shape.
type Reply struct {
	Code     int
	Enhanced string // "5.1.1", empty when the server gave none
	Text     string

	lines []string // as received, for EHLO
	// ofMessage says the reply is about the message or its sender, not a
	// recipient's address: MAIL FROM's, DATA's, or the relay's refusal of
	// the whole message.
	ofMessage bool
}

// addressVerdict is what the reply, a failure, says of the recipient's address.
func (r Reply) addressVerdict() outcome.Verdict {
	v, _ := bounce.Classify(bounce.Failure{Status: r.Enhanced, Code: r.Code, Text: r.Text, OfMessage: r.ofMessage})
	return v
}

func (r Reply) String() string {
	s := strconv.Itoa(r.Code)
	if r.Enhanced != "" {
		s += " " + r.Enhanced
	}
	return s + " " + r.Text
}

func (r Reply) ok() bool        { return r.Code >= 200 && r.Code < 400 }
func (r Reply) permanent() bool { return r.Code >= 500 }

// client is one SMTP session with an upstream: a reduced SMTP client that
// pipelines (RFC 2920) and bounds every step with its own timeout, which
// go-smtp's client does not offer.
type client struct {
	nc   net.Conn
	r    *textproto.Reader
	w    *bufio.Writer
	host string // the upstream's name, for results and logs
	ext  map[string]string
	tls  bool
	// sec is how the session is secured.
	sec      outcome.TLS
	timeouts Timeouts
	// broken is set once the session cannot carry another transaction.
	broken bool
}

// deadlineWriter renews the write deadline before each write, so that each
// block of content gets its own timeout.
type deadlineWriter struct {
	nc net.Conn
	d  *time.Duration
}

func (w deadlineWriter) Write(p []byte) (int, error) {
	w.nc.SetWriteDeadline(time.Now().Add(*w.d))
	return w.nc.Write(p)
}

// maxReplyLine bounds a reply line: an upstream may not fill our memory.
const maxReplyLine = 4096

type lineLimiter struct {
	r   io.Reader
	cur int
}

func (l *lineLimiter) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for _, c := range p[:n] {
		if c == '\n' {
			l.cur = 0
			continue
		}
		if l.cur++; l.cur > maxReplyLine {
			return 0, fmt.Errorf("reply line longer than %d octets", maxReplyLine)
		}
	}
	return n, err
}

// dial connects to addr (host:port), with implicit TLS when tlsCfg is set,
// and reads the greeting. host names the upstream in results.
func dial(ctx context.Context, addr, host string, tlsCfg *tls.Config, t Timeouts) (*client, error) {
	d := net.Dialer{Timeout: t.Connect}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		tc := tls.Client(nc, tlsCfg)
		tc.SetDeadline(time.Now().Add(t.Greeting))
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", addr, err)
		}
		nc = tc
	}
	c := &client{host: host, timeouts: t}
	c.setConn(nc)
	rep, err := c.read(t.Greeting)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("greeting from %s: %w", addr, err)
	}
	if !rep.ok() {
		nc.Close()
		return nil, &replyError{rep, "greeting"}
	}
	return c, nil
}

func (c *client) setConn(nc net.Conn) {
	if tc, ok := nc.(*tls.Conn); ok {
		cs := tc.ConnectionState()
		c.tls, c.sec.Version, c.sec.Cipher = true, tls.VersionName(cs.Version), tls.CipherSuiteName(cs.CipherSuite)
	}
	c.nc = nc
	c.r = textproto.NewReader(bufio.NewReader(&lineLimiter{r: nc}))
	c.w = bufio.NewWriter(deadlineWriter{nc: nc, d: &c.timeouts.DataBlock})
}

// replyError is a reply that ends a step of the session.
type replyError struct {
	Reply
	step string
}

func (e *replyError) Error() string { return fmt.Sprintf("%s: %s", e.step, e.Reply) }

// read reads one reply within d.
func (c *client) read(d time.Duration) (Reply, error) {
	c.nc.SetReadDeadline(time.Now().Add(d))
	code, msg, err := c.r.ReadResponse(0)
	if err != nil {
		c.broken = true
		return Reply{}, err
	}
	rep := Reply{Code: code, Text: msg, lines: strings.Split(msg, "\n")}
	// RFC 2034: the enhanced code starts the text, and each of its lines.
	if first, rest, ok := strings.Cut(msg, " "); ok && isEnhanced(first) {
		rep.Enhanced = first
		rep.Text = strings.ReplaceAll(rest, "\n"+first+" ", "\n")
	}
	rep.Text = strings.ReplaceAll(rep.Text, "\n", " ")
	if code == 421 {
		c.broken = true
	}
	return rep, nil
}

func isEnhanced(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 3 || (parts[0] != "2" && parts[0] != "4" && parts[0] != "5") {
		return false
	}
	for _, p := range parts[1:] {
		if _, err := strconv.Atoi(p); err != nil || len(p) > 3 {
			return false
		}
	}
	return true
}

// cmd sends one command and reads its reply.
func (c *client) cmd(d time.Duration, format string, args ...any) (Reply, error) {
	fmt.Fprintf(c.w, format+"\r\n", args...)
	if err := c.w.Flush(); err != nil {
		c.broken = true
		return Reply{}, err
	}
	return c.read(d)
}

// hello says EHLO, or HELO to a server that refuses EHLO, and learns the
// extensions.
func (c *client) hello(name string) error {
	rep, err := c.cmd(c.timeouts.Command, "EHLO %s", name)
	if err != nil {
		return fmt.Errorf("EHLO: %w", err)
	}
	if rep.Code == 250 {
		c.ext = map[string]string{}
		for _, l := range rep.lines[1:] {
			k, v, _ := strings.Cut(strings.TrimSpace(l), " ")
			c.ext[strings.ToUpper(k)] = v
		}
		return nil
	}
	rep, err = c.cmd(c.timeouts.Command, "HELO %s", name)
	if err != nil {
		return fmt.Errorf("HELO: %w", err)
	}
	if rep.Code != 250 {
		return &replyError{rep, "HELO"}
	}
	c.ext = map[string]string{}
	return nil
}

// has reports whether the server offers an extension.
func (c *client) has(ext string) bool {
	_, ok := c.ext[ext]
	return ok
}

// startTLS upgrades the session; EHLO must be said again afterwards.
func (c *client) startTLS(cfg *tls.Config, name string) error {
	rep, err := c.cmd(c.timeouts.Command, "STARTTLS")
	if err != nil {
		return fmt.Errorf("STARTTLS: %w", err)
	}
	if rep.Code != 220 {
		return &replyError{rep, "STARTTLS"}
	}
	tc := tls.Client(c.nc, cfg)
	tc.SetDeadline(time.Now().Add(c.timeouts.Command))
	if err := tc.Handshake(); err != nil {
		c.broken = true
		return fmt.Errorf("TLS handshake: %w", err)
	}
	tc.SetDeadline(time.Time{})
	c.setConn(tc)
	return c.hello(name)
}

// security is how the session is secured, for the results it carries.
func (c *client) security() *outcome.TLS {
	sec := c.sec
	return &sec
}

// auth authenticates with PLAIN, or LOGIN when the server offers only that.
func (c *client) auth(user, pass string) error {
	mechs := strings.Fields(strings.ToUpper(c.ext["AUTH"]))
	var mech sasl.Client
	switch {
	case contains(mechs, "PLAIN"):
		mech = sasl.NewPlainClient("", user, pass)
	case contains(mechs, "LOGIN"):
		mech = sasl.NewLoginClient(user, pass)
	case len(mechs) == 0:
		return errors.New("the server offers no AUTH (is TLS needed first?)")
	default:
		return fmt.Errorf("the server offers AUTH %s, none of PLAIN and LOGIN", strings.Join(mechs, " "))
	}
	name, ir, err := mech.Start()
	if err != nil {
		return err
	}
	line := "AUTH " + name
	if ir != nil {
		line += " " + encode64(ir)
	}
	rep, err := c.cmd(c.timeouts.Command, "%s", line)
	for err == nil && rep.Code == 334 {
		var challenge []byte
		if challenge, err = decode64(rep); err != nil {
			break
		}
		var resp []byte
		if resp, err = mech.Next(challenge); err != nil {
			c.cmd(c.timeouts.Command, "*")
			break
		}
		rep, err = c.cmd(c.timeouts.Command, "%s", encode64(resp))
	}
	if err != nil {
		return fmt.Errorf("AUTH: %w", err)
	}
	if rep.Code != 235 {
		return &replyError{rep, "AUTH"}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// quit ends the session politely and closes it.
func (c *client) quit() {
	if !c.broken {
		if rep, err := c.cmd(c.timeouts.Command, "QUIT"); err == nil && rep.Code == 221 {
			// The server closes the connection after its 221: waiting
			// for that, briefly, ends the session on its side too before
			// the next opens, as a site counts sessions by connections
			// (a site's sessions at once, shared by a fleet).
			c.nc.SetReadDeadline(time.Now().Add(quitClose))
			io.Copy(io.Discard, c.r.R)
		}
	}
	c.nc.Close()
}

// quitClose is how long quit waits for the server to close after its 221.
const quitClose = time.Second

func (c *client) close() { c.nc.Close() }
