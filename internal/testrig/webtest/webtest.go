// Package webtest runs HTTPS servers for tests at an address of the
// test's choosing (127.0.0.x:port), as MTA-STS policy hosts and TLS
// report receivers are found by name and a port the relay is told.
package webtest

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Server is a running HTTPS server that counts and keeps its requests.
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	requests []Request
}

// Request is what the server was sent.
type Request struct {
	Method, Host, Path, ContentType string
	Body                            []byte
}

// StartTLS serves h over TLS with cfg at addr ("127.0.0.4:0" for any
// port), until the test ends.
func StartTLS(t testing.TB, addr string, cfg *tls.Config, h http.Handler) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{}
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		s.mu.Lock()
		s.requests = append(s.requests, Request{Method: r.Method, Host: r.Host, Path: r.URL.Path, ContentType: r.Header.Get("Content-Type"), Body: body})
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	hs.Listener.Close()
	hs.Listener = ln
	hs.TLS = cfg
	hs.StartTLS()
	t.Cleanup(hs.Close)
	s.Server = hs
	return s
}

// Requests are the requests served so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Port is the port the server listens on.
func (s *Server) Port() int { return s.Listener.Addr().(*net.TCPAddr).Port }
