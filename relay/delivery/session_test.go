package delivery

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/outboxtest"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/internal/testrig/testcert"
	"github.com/genropy/postino/outcome"
)

// A smarthost route's TLS and AUTH, against go-smtp upstreams: what the
// route requires and the upstream does not give fails the attempt as
// temporary, with the reason in the recipient's result.
func TestSmarthostTLSAndAuth(t *testing.T) {
	cert := testcert.New(t)
	other := testcert.New(t) // an authority the routes do not trust
	users := map[string]string{"relay": "upstream-pw"}
	for _, tt := range []struct {
		name     string
		upstream smtptest.Options
		route    Route
		// want is, for a message delivered, empty; else what the
		// recipient's result must say.
		want string
		// clear: delivered without TLS.
		clear bool
	}{
		{
			name:     "opportunistic STARTTLS, the certificate not judged",
			upstream: smtptest.Options{TLS: other.ServerConfig()},
			route:    Route{TLS: TLSOpportunistic, CAFile: cert.CAFile},
		},
		{
			name:     "opportunistic, STARTTLS not offered",
			upstream: smtptest.Options{},
			route:    Route{TLS: TLSOpportunistic},
			clear:    true,
		},
		{
			name:     "none, STARTTLS offered",
			upstream: smtptest.Options{TLS: cert.ServerConfig()},
			route:    Route{TLS: TLSNone},
			clear:    true,
		},
		{
			name:     "STARTTLS with a trusted certificate",
			upstream: smtptest.Options{TLS: cert.ServerConfig()},
			route:    Route{TLS: TLSStartTLS, CAFile: cert.CAFile},
		},
		{
			name:     "STARTTLS not offered",
			upstream: smtptest.Options{},
			route:    Route{TLS: TLSStartTLS, CAFile: cert.CAFile},
			want:     "does not offer STARTTLS, which route default requires",
		},
		{
			name:     "STARTTLS with an untrusted certificate",
			upstream: smtptest.Options{TLS: other.ServerConfig()},
			route:    Route{TLS: TLSStartTLS, CAFile: cert.CAFile},
			want:     "TLS handshake: tls: failed to verify certificate: x509: certificate signed by unknown authority",
		},
		{
			name:     "implicit TLS",
			upstream: smtptest.Options{TLS: cert.ServerConfig(), Implicit: true},
			route:    Route{TLS: TLSImplicit, CAFile: cert.CAFile},
		},
		{
			name:     "implicit TLS with an untrusted certificate",
			upstream: smtptest.Options{TLS: other.ServerConfig(), Implicit: true},
			route:    Route{TLS: TLSImplicit, CAFile: cert.CAFile},
			want:     "tls: failed to verify certificate: x509: certificate signed by unknown authority",
		},
		{
			name:     "AUTH PLAIN",
			upstream: smtptest.Options{TLS: cert.ServerConfig(), Auth: users},
			route:    Route{TLS: TLSStartTLS, CAFile: cert.CAFile, Username: "relay", Password: "upstream-pw"},
		},
		{
			name:     "AUTH PLAIN with a wrong password",
			upstream: smtptest.Options{TLS: cert.ServerConfig(), Auth: users},
			route:    Route{TLS: TLSStartTLS, CAFile: cert.CAFile, Username: "relay", Password: "wrong"},
			want:     "as relay failed (check the route's username and password): AUTH: 535 5.7.8 Authentication failed",
		},
		{
			name:     "AUTH LOGIN",
			upstream: smtptest.Options{TLS: cert.ServerConfig(), Implicit: true, Auth: users, Login: true},
			route:    Route{TLS: TLSImplicit, CAFile: cert.CAFile, Username: "relay", Password: "upstream-pw"},
		},
		{
			name:     "AUTH LOGIN with a wrong password",
			upstream: smtptest.Options{TLS: cert.ServerConfig(), Implicit: true, Auth: users, Login: true},
			route:    Route{TLS: TLSImplicit, CAFile: cert.CAFile, Username: "relay", Password: "wrong"},
			want:     "as relay failed (check the route's username and password): AUTH: 535 5.7.8 Authentication failed",
		},
		{
			name:     "AUTH required but not offered",
			upstream: smtptest.Options{TLS: cert.ServerConfig()},
			route:    Route{TLS: TLSStartTLS, CAFile: cert.CAFile, Username: "relay", Password: "upstream-pw"},
			want:     "as relay failed (check the route's username and password): the server offers no AUTH (is TLS needed first?)",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := smtptest.Start(t, tt.upstream)
			route := tt.route
			route.Name, route.Smarthost, route.MaxConnections = DefaultRoute, up.Addr, 1
			m := firstAttempt(t, route)
			msgs := up.Messages()
			if tt.want == "" {
				if m.Status != backends.StatusSentAcknowledged {
					t.Fatalf("%s: %s, want delivered", m.Status, m.Reason)
				}
				if len(msgs) != 1 || msgs[0].TLS == tt.clear || msgs[0].AuthUser != route.Username {
					t.Errorf("the upstream got %+v, want one message (in clear: %v) from user %q", msgs, tt.clear, route.Username)
				}
				return
			}
			if len(msgs) != 0 {
				t.Errorf("the upstream got %d messages", len(msgs))
			}
			r := m.Results[0]
			if m.Status != backends.StatusReady || r.Status != outcome.RecipientPending ||
				r.Code != 451 || r.EnhancedCode != "4.4.1" || !strings.Contains(r.Text, tt.want) {
				t.Errorf("%s (%s), recipient %+v; want READY and pending with 451 4.4.1 %q", m.Status, m.Reason, r, tt.want)
			}
		})
	}
}

// firstAttempt delivers one message, m0, through route, and returns it as
// its first attempt left it.
func firstAttempt(t *testing.T, route Route) *backends.Message {
	t.Helper()
	sp, store := outboxtest.Open(t)
	addReady(t, sp, store, 1)
	stop := runEngine(t, store, sp, route, time.Minute)
	defer stop()
	deadline := time.Now().Add(time.Minute)
	for {
		m, err := store.Get(context.Background(), "m0")
		if err == nil && m.Attempts > 0 {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("no attempt recorded after a minute: %+v, %v", m, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
