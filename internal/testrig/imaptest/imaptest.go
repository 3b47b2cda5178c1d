// Package imaptest runs go-imap/v2's in-memory IMAP server for tests, and
// reads and fills its folders as a mail client would.
package imaptest

import (
	"bytes"
	"cmp"
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/emersion/go-imap/v2/imapclient"
	"github.com/emersion/go-imap/v2/imapserver"
	"github.com/emersion/go-imap/v2/imapserver/imapmemserver"

	"github.com/genropy/postino/internal/testrig/testcert"
)

// Server is an in-memory IMAP server with one user.
type Server struct {
	Addr     string
	User     string
	Password string

	mem  *imapmemserver.Server
	tls  *tls.Config // the client side, when the server speaks TLS
	mu   sync.Mutex
	user *imapmemserver.User
}

// Options shape the server.
type Options struct {
	// RFC3501Only serves plain IMAP4rev1: no MOVE, no IDLE.
	RFC3501Only bool
	// NoUser starts the server without its user (logins fail) until
	// AddUser.
	NoUser bool
	// TLS serves implicit TLS (IMAPS) with this certificate.
	TLS *testcert.Pair
	// User is the login; bounces@example.com when empty.
	User string
}

// Start serves on loopback until the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	s := &Server{User: cmp.Or(o.User, "bounces@example.com"), Password: "secret", mem: imapmemserver.New()}
	s.user = imapmemserver.NewUser(s.User, s.Password)
	if err := s.user.Create("INBOX", nil); err != nil {
		t.Fatal(err)
	}
	if !o.NoUser {
		s.mem.AddUser(s.user)
	}
	caps := imap.CapSet{imap.CapIMAP4rev1: {}, imap.CapIMAP4rev2: {}}
	if o.RFC3501Only {
		caps = imap.CapSet{imap.CapIMAP4rev1: {}}
	}
	srv := imapserver.New(&imapserver.Options{
		NewSession: func(*imapserver.Conn) (imapserver.Session, *imapserver.GreetingData, error) {
			return s.mem.NewSession(), nil, nil
		},
		Caps:         caps,
		InsecureAuth: true,
		Logger:       discard{},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = ln.Addr().String()
	if o.TLS != nil {
		ln = tls.NewListener(ln, o.TLS.ServerConfig())
		s.tls = o.TLS.ClientConfig()
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s
}

type discard struct{}

func (discard) Printf(string, ...any) {}

// AddUser lets the user log in.
func (s *Server) AddUser() { s.mem.AddUser(s.user) }

// ResetUIDValidity deletes and creates folder again, empty, with a new
// UIDVALIDITY, as a server does when its index is rebuilt.
func (s *Server) ResetUIDValidity(t testing.TB, folder string) {
	t.Helper()
	if err := s.user.Delete(folder); err != nil {
		t.Fatal(err)
	}
	if err := s.user.Create(folder, nil); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) client(t testing.TB) *imapclient.Client {
	t.Helper()
	var c *imapclient.Client
	var err error
	if s.tls != nil {
		c, err = imapclient.DialTLS(s.Addr, &imapclient.Options{TLSConfig: s.tls})
	} else {
		c, err = imapclient.DialInsecure(s.Addr, nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Login(s.User, s.Password).Wait(); err != nil {
		c.Close()
		t.Fatal(err)
	}
	return c
}

// Append puts a message into folder, creating the folder when missing.
func (s *Server) Append(t testing.TB, folder string, msg []byte) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.client(t)
	defer c.Close()
	c.Create(folder, nil).Wait() // exists already, mostly
	cmd := c.Append(folder, int64(len(msg)), &imap.AppendOptions{Time: time.Now()})
	if _, err := cmd.Write(msg); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
}

// Message is one message of a folder.
type Message struct {
	UID   imap.UID
	Flags []imap.Flag
	Raw   []byte
}

// Messages lists folder; none when the folder does not exist.
func (s *Server) Messages(t testing.TB, folder string) []Message {
	t.Helper()
	c := s.client(t)
	defer c.Close()
	sel, err := c.Select(folder, &imap.SelectOptions{ReadOnly: true}).Wait()
	if err != nil || sel.NumMessages == 0 {
		return nil
	}
	section := &imap.FetchItemBodySection{Peek: true}
	bufs, err := c.Fetch(imap.SeqSet{imap.SeqRange{Start: 1, Stop: 0}}, &imap.FetchOptions{UID: true, Flags: true,
		BodySection: []*imap.FetchItemBodySection{section}}).Collect()
	if err != nil {
		t.Fatal(err)
	}
	var out []Message
	for _, b := range bufs {
		out = append(out, Message{UID: b.UID, Flags: b.Flags, Raw: bytes.Clone(b.FindBodySection(section))})
	}
	return out
}
