// Package delivery sends what the relay accepted: READY messages are claimed,
// routed to a smarthost or to the recipients' MX hosts, sent over reused SMTP
// sessions, and end SENT, FAILED or back in READY for a later attempt, with
// every recipient's result recorded.
package delivery

import (
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
)

// TLS modes of a route.
const (
	// TLSNone is SMTP in clear; a smarthost's default.
	TLSNone = "none"
	// TLSOpportunistic is STARTTLS when the server offers it, its
	// certificate not judged, and SMTP in clear when it does not or the
	// handshake fails: MX delivery's default.
	TLSOpportunistic = "opportunistic"
	// TLSStartTLS is STARTTLS required, the certificate verified.
	TLSStartTLS = "starttls"
	// TLSImplicit is TLS from the first byte, usually port 465, the
	// certificate verified.
	TLSImplicit = "tls"
)

// TLSModes are the TLS modes of a route, as the configuration, its errors
// and the help list them.
func TLSModes() []string { return []string{TLSNone, TLSOpportunistic, TLSStartTLS, TLSImplicit} }

// TLSModeList is TLSModes as a sentence lists them.
func TLSModeList() string {
	m := TLSModes()
	return strings.Join(m[:len(m)-1], ", ") + " or " + m[len(m)-1]
}

// Route is one way out: a smarthost, or the recipients' MX hosts.
type Route struct {
	Name string
	// Smarthost is host:port; empty means MX delivery.
	Smarthost string
	TLS       string
	// SkipVerify accepts any certificate from the smarthost.
	SkipVerify bool
	// CAFile holds extra certificate authorities to trust (PEM).
	CAFile string
	// Username and Password authenticate to the smarthost.
	Username string
	Password string
	// MaxConnections bounds the sessions to one destination at once.
	MaxConnections int
	// Rate bounds messages per second to one destination; 0 is no bound.
	Rate float64
	// MXPort is the port of MX hosts (25; tests change it).
	MXPort int
	// BounceAddress, when set, is the envelope sender used upstream so that
	// DSNs reach the bounce mailbox. "{id}" in it becomes the message id
	// (VERP).
	BounceAddress string
	// DKIMDomain, when set, signs the route's messages for this domain
	// instead of their From header's (a parent domain, say).
	DKIMDomain string
	// ReceiptsWithin, when set, is how long after SENT the receipts of the
	// route's messages may take (a PEC account's acceptance): the message
	// is SENT with the alarm that watches them (backends.AlarmPECReceipts).
	ReceiptsWithin time.Duration

	tlsConfig *tls.Config
}

// MX reports whether the route delivers to the recipients' MX hosts.
func (r *Route) MX() bool { return r.Smarthost == "" }

// prepare checks the route and builds its TLS configuration.
func (r *Route) prepare() error {
	if r.MaxConnections <= 0 {
		return fmt.Errorf("route %s: max_connections must be positive", r.Name)
	}
	if r.BounceAddress != "" && !strings.Contains(r.BounceAddress, "@") {
		return fmt.Errorf("route %s: bounce address %q is not an address", r.Name, r.BounceAddress)
	}
	if r.MX() {
		switch r.TLS {
		case "", TLSOpportunistic:
			r.TLS = TLSOpportunistic
			return nil
		case TLSNone:
			// In clear, never STARTTLS: as an operator may ask of MX
			// hosts whose TLS is broken.
			return nil
		case TLSStartTLS, TLSImplicit:
			return fmt.Errorf("route %s: tls %s applies to a smarthost, and the route has none: MX hosts are told by DNS, and not one "+
				"certificate can be required of all of them; leave tls out for %s STARTTLS, or set %s for none", r.Name, r.TLS, TLSOpportunistic, TLSNone)
		}
		return fmt.Errorf("route %s: tls %q: use %s", r.Name, r.TLS, TLSModeList())
	}
	host, _, err := net.SplitHostPort(r.Smarthost)
	if err != nil {
		return fmt.Errorf("route %s: smarthost %q is not host:port", r.Name, r.Smarthost)
	}
	switch r.TLS {
	case "", TLSNone, TLSOpportunistic:
		r.TLS = cmp.Or(r.TLS, TLSNone)
		if r.Username != "" {
			return fmt.Errorf("route %s: AUTH to %s with tls %s would send the password in clear (%s falls back to clear when STARTTLS is not offered); "+
				"set tls to %s or %s", r.Name, r.Smarthost, r.TLS, TLSOpportunistic, TLSStartTLS, TLSImplicit)
		}
		return nil
	case TLSStartTLS, TLSImplicit:
	default:
		return fmt.Errorf("route %s: tls %q: use %s", r.Name, r.TLS, TLSModeList())
	}
	r.tlsConfig = &tls.Config{ServerName: host, InsecureSkipVerify: r.SkipVerify, MinVersion: tls.VersionTLS12}
	if r.CAFile != "" {
		pool, err := r.rootCAs()
		if err != nil {
			return err
		}
		r.tlsConfig.RootCAs = pool
	}
	return nil
}

// rootCAs is the system's authorities and those of CAFile.
func (r *Route) rootCAs() (*x509.CertPool, error) {
	pool, err := rootPool(r.CAFile)
	if err != nil {
		return nil, fmt.Errorf("route %s: %w", r.Name, err)
	}
	return pool, nil
}

// Rule picks a route for the messages it matches: by envelope sender
// address, sender domain, or the AUTH account that submitted the message.
// A rule with several conditions needs all of them.
type Rule struct {
	Sender   string
	Domain   string
	AuthUser string
	Route    string
}

func (r Rule) matches(m *backends.Message) bool {
	sender := strings.ToLower(m.Envelope.Sender)
	domain := domainOf(sender)
	return (r.Sender == "" || strings.EqualFold(r.Sender, sender)) &&
		(r.Domain == "" || strings.EqualFold(r.Domain, domain)) &&
		(r.AuthUser == "" || r.AuthUser == m.Envelope.AuthUser)
}

// DefaultRoute names the route taken when no rule matches.
const DefaultRoute = "default"

// Routes are the relay's routes and the rules that choose among them.
type Routes struct {
	byName map[string]*Route
	rules  []Rule
}

// NewRoutes checks the routes and rules; one route must be named default.
func NewRoutes(routes []Route, rules []Rule) (*Routes, error) {
	rs := &Routes{byName: map[string]*Route{}, rules: rules}
	for i := range routes {
		r := routes[i]
		if r.Name == "" {
			return nil, errors.New("a route has no name")
		}
		if _, dup := rs.byName[r.Name]; dup {
			return nil, fmt.Errorf("two routes are named %s", r.Name)
		}
		if err := r.prepare(); err != nil {
			return nil, err
		}
		rs.byName[r.Name] = &r
	}
	if rs.byName[DefaultRoute] == nil {
		return nil, errors.New("no route is named default")
	}
	for i, rule := range rules {
		if rule.Sender == "" && rule.Domain == "" && rule.AuthUser == "" {
			return nil, fmt.Errorf("rule %d matches nothing: give a sender, domain or auth_user", i+1)
		}
		if rs.byName[rule.Route] == nil {
			return nil, fmt.Errorf("rule %d names route %q, which does not exist", i+1, rule.Route)
		}
	}
	return rs, nil
}

// Choose names the route of a message: the first matching rule's, or the
// default.
func (rs *Routes) Choose(m *backends.Message) (string, error) {
	for _, r := range rs.rules {
		if r.matches(m) {
			return r.Route, nil
		}
	}
	return DefaultRoute, nil
}

// get returns a route by name; a name the configuration no longer has falls
// back to choosing again.
func (rs *Routes) get(m *backends.Message) *Route {
	if r := rs.byName[m.Route]; r != nil {
		return r
	}
	name, _ := rs.Choose(m)
	return rs.byName[name]
}

// envelopeSender is the MAIL FROM used upstream.
func (r *Route) envelopeSender(m *backends.Message) string {
	if r.BounceAddress == "" || m.Envelope.Sender == "" {
		return m.Envelope.Sender // a null sender stays null: it is a bounce
	}
	return strings.ReplaceAll(r.BounceAddress, "{id}", m.ID)
}
