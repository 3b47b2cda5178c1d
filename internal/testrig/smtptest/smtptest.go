// Package smtptest runs an upstream SMTP server (go-smtp) for tests: it keeps
// what it receives and answers as the test tells it.
package smtptest

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Message is one message the server received.
type Message struct {
	From     string
	To       []string
	Data     []byte
	Opts     smtp.MailOptions
	AuthUser string
	TLS      bool
	Received time.Time
}

// Header returns the value of the first header field with that name.
func (m Message) Header(name string) string {
	head, _, _ := strings.Cut(string(m.Data), "\r\n\r\n")
	for _, l := range strings.Split(head, "\r\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, name) {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// Options shape the server.
type Options struct {
	// Addr to listen on; 127.0.0.1:0 when empty.
	Addr string
	// TLS enables STARTTLS, or implicit TLS with Implicit.
	TLS      *tls.Config
	Implicit bool
	// Auth requires AUTH PLAIN with one of these users and passwords, or
	// AUTH LOGIN alone with Login.
	Auth  map[string]string
	Login bool
	// NoSMTPUTF8 leaves SMTPUTF8 out of the extensions.
	NoSMTPUTF8 bool
	// No8BITMIME leaves 8BITMIME out of the extensions, which go-smtp
	// always offers: an upstream that wants 7-bit mail.
	No8BITMIME bool
	// MaxSize is the SIZE limit; 0 is none.
	MaxSize int64
	// MaxSessions, when set, greets the sessions beyond that many at once
	// with "421 4.7.0" and closes them, as a provider that throttles.
	MaxSessions int
	// Down closes every connection as soon as it is accepted: a host that
	// takes no session, whose connections can be counted.
	Down bool
}

// Conn is one connection the server accepted.
type Conn struct {
	At time.Time
	// Open is how many connections were open with it, itself included.
	Open int
	// Refused says it was greeted with 421 and closed (MaxSessions).
	Refused bool
}

// Server is a running upstream.
type Server struct {
	Addr string

	mu   sync.Mutex
	msgs []Message
	// Rcpt, when set, answers RCPT TO; nil accepts.
	rcpt func(to string) error
	// data, when set, answers the end of DATA for a received message.
	data func(m Message) error
	// hang keeps DATA's end from answering for that long.
	hang time.Duration
	// drop closes the connection in the middle of DATA.
	drop  bool
	conns int
	srv   *smtp.Server
	// open counts the connections open; accepted lists them all.
	open     int
	accepted []Conn
}

// Start runs a server until the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	s := &Server{}
	srv := smtp.NewServer(backend{s, o})
	srv.Domain = "upstream.test"
	srv.AllowInsecureAuth = true
	srv.EnableSMTPUTF8 = !o.NoSMTPUTF8
	srv.EnableDSN = true
	srv.MaxMessageBytes = o.MaxSize
	srv.TLSConfig = o.TLS
	srv.ReadTimeout = time.Minute
	srv.WriteTimeout = time.Minute
	srv.ErrorLog = nopLogger{}
	addr := o.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if o.No8BITMIME {
		l = no8bitListener{l}
	}
	l = &countingListener{Listener: l, s: s, o: o}
	if o.Implicit {
		l = tls.NewListener(l, o.TLS)
	}
	s.Addr = l.Addr().String()
	s.srv = srv
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return s
}

// no8bitListener's connections leave 8BITMIME out of EHLO's reply: the
// server writes its replies a whole at a time, and only replies.
type no8bitListener struct{ net.Listener }

func (l no8bitListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return no8bitConn{c}, nil
}

type no8bitConn struct{ net.Conn }

func (c no8bitConn) Write(p []byte) (int, error) {
	q := bytes.ReplaceAll(p, []byte("250-8BITMIME\r\n"), nil)
	if _, err := c.Conn.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

// countingListener counts the connections, and refuses those Options
// say to.
type countingListener struct {
	net.Listener
	s *Server
	o Options
}

func (l *countingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		s := l.s
		s.mu.Lock()
		s.open++
		refused := l.o.MaxSessions > 0 && s.open > l.o.MaxSessions
		s.accepted = append(s.accepted, Conn{At: time.Now(), Open: s.open, Refused: refused})
		s.mu.Unlock()
		cc := &countedConn{Conn: c, s: s}
		switch {
		case l.o.Down:
			cc.Close()
			continue
		case refused:
			go func() {
				cc.Write([]byte("421 4.7.0 Too many sessions from your address, try again later\r\n"))
				cc.Close()
			}()
			continue
		}
		return cc, nil
	}
}

type countedConn struct {
	net.Conn
	s    *Server
	once sync.Once
}

func (c *countedConn) Close() error {
	c.once.Do(func() {
		c.s.mu.Lock()
		c.s.open--
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}

// Accepted lists the connections accepted so far.
func (s *Server) Accepted() []Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.accepted)
}

// SharedPort finds a port free on several loopback addresses, so that MX
// hosts on 127.0.0.2 and 127.0.0.3 listen where port 25 would be.
func SharedPort(t testing.TB, ips ...string) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", ips[0]+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		ok := true
		for _, ip := range ips[1:] {
			l2, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			l2.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no port free on every address")
	return 0
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}
func (nopLogger) Println(...any)        {}

// Messages returns what was received so far.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.msgs...)
}

// Connections counts the sessions opened so far.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

// OnRcpt sets the answer to RCPT TO.
func (s *Server) OnRcpt(f func(to string) error) {
	s.mu.Lock()
	s.rcpt = f
	s.mu.Unlock()
}

// OnData sets the answer to the end of DATA; a message refused is not kept.
func (s *Server) OnData(f func(m Message) error) {
	s.mu.Lock()
	s.data = f
	s.mu.Unlock()
}

// Hang delays the answer to the end of DATA.
func (s *Server) Hang(d time.Duration) {
	s.mu.Lock()
	s.hang = d
	s.mu.Unlock()
}

// DropInData closes connections in the middle of DATA.
func (s *Server) DropInData(drop bool) {
	s.mu.Lock()
	s.drop = drop
	s.mu.Unlock()
}

// Reply makes an SMTP error reply for the hooks.
func Reply(code int, enhanced smtp.EnhancedCode, text string) error {
	return &smtp.SMTPError{Code: code, EnhancedCode: enhanced, Message: text}
}

type backend struct {
	s *Server
	o Options
}

func (b backend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	b.s.mu.Lock()
	b.s.conns++
	b.s.mu.Unlock()
	_, isTLS := c.TLSConnectionState()
	return &session{s: b.s, o: b.o, conn: c, tls: isTLS || b.o.Implicit}, nil
}

type session struct {
	s    *Server
	o    Options
	conn *smtp.Conn
	tls  bool
	user string
	msg  Message
}

func (ss *session) AuthMechanisms() []string {
	switch {
	case ss.o.Auth == nil:
		return nil
	case ss.o.Login:
		return []string{sasl.Login}
	}
	return []string{sasl.Plain}
}

func (ss *session) Auth(mech string) (sasl.Server, error) {
	if !slices.Contains(ss.AuthMechanisms(), mech) {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	check := func(user, pass string) error {
		if want, ok := ss.o.Auth[user]; !ok || want != pass {
			return smtp.ErrAuthFailed
		}
		ss.user = user
		return nil
	}
	if mech == sasl.Login {
		return &loginServer{check: check}, nil
	}
	return sasl.NewPlainServer(func(_, user, pass string) error { return check(user, pass) }), nil
}

// loginServer is the server side of AUTH LOGIN, which go-sasl lacks: the
// user name, then the password, each asked for unless already given.
type loginServer struct {
	check func(user, pass string) error
	user  []byte
}

func (l *loginServer) Next(resp []byte) ([]byte, bool, error) {
	switch {
	case l.user == nil && resp == nil:
		return []byte("Username:"), false, nil
	case l.user == nil:
		l.user = resp
		return []byte("Password:"), false, nil
	}
	return nil, true, l.check(string(l.user), string(resp))
}

func (ss *session) Mail(from string, opts *smtp.MailOptions) error {
	if ss.o.Auth != nil && ss.user == "" {
		return smtp.ErrAuthRequired
	}
	ss.msg = Message{From: from, Opts: *opts, AuthUser: ss.user}
	if _, ok := ss.conn.TLSConnectionState(); ok {
		ss.tls = true
	}
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	ss.s.mu.Lock()
	f := ss.s.rcpt
	ss.s.mu.Unlock()
	if f != nil {
		if err := f(to); err != nil {
			return err
		}
	}
	ss.msg.To = append(ss.msg.To, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	ss.s.mu.Lock()
	data, hang, drop := ss.s.data, ss.s.hang, ss.s.drop
	ss.s.mu.Unlock()
	if drop {
		buf := make([]byte, 16)
		io.ReadFull(r, buf)
		ss.conn.Conn().Close()
		return errors.New("dropped")
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if hang > 0 {
		time.Sleep(hang)
	}
	m := ss.msg
	m.Data, m.TLS, m.Received = b, ss.tls, time.Now()
	if data != nil {
		if err := data(m); err != nil {
			return err
		}
	}
	ss.s.mu.Lock()
	ss.s.msgs = append(ss.s.msgs, m)
	ss.s.mu.Unlock()
	return nil
}

func (ss *session) Reset()        { ss.msg = Message{} }
func (ss *session) Logout() error { return nil }
