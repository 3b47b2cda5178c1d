package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/mail"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay/suppression"
	"github.com/genropy/postino/relay/unsubscribe"
)

// EventUnsubscribed is the notice plugins get of an unsubscribe, on the
// message whose link or address was used.
const EventUnsubscribed = "UNSUBSCRIBED"

// unsubscribeNamespace makes the ids of unsubscribe events: a second
// click on one link is the same event.
var unsubscribeNamespace = uuid.MustParse("3c7e9d1a-2f4b-4e8a-9b6c-5d0e1f2a3b4c")

// unsubscribes honours the one-click unsubscribes of bulk streams: the
// fields their messages get, the requests the listener serves, and the
// mail that reaches a bounce mailbox.
type unsubscribes struct {
	keys   *unsubscribe.Keys
	cfg    UnsubscribeConfig
	policy *suppression.Policy
	events interface {
		AddEvent(ctx context.Context, e *backends.Event) error
	}
	wake  func()
	count *prometheus.CounterVec
	log   *slog.Logger
}

// newUnsubscribes reads the keys; nil when no stream is bulk.
func (c *Config) newUnsubscribes(policy *suppression.Policy, events interface {
	AddEvent(ctx context.Context, e *backends.Event) error
}, wake func(), reg prometheus.Registerer, log *slog.Logger) (*unsubscribes, error) {
	if c.Unsubscribe.BaseURL == "" && c.Unsubscribe.Listen == "" {
		return nil, nil
	}
	keys, err := c.unsubscribeKeys()
	if err != nil {
		return nil, err
	}
	u := &unsubscribes{keys: keys, cfg: c.Unsubscribe, policy: policy, events: events, wake: wake, log: log,
		count: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "postino_unsubscribes_total",
			Help: "Unsubscribes honoured, by how they came: https (one-click) or mailto."}, []string{"via"})}
	reg.MustRegister(u.count)
	return u, nil
}

// unsubscribeKeys loads the keys that sign and verify the tokens.
func (c *Config) unsubscribeKeys() (*unsubscribe.Keys, error) {
	if len(c.Unsubscribe.Keys) == 0 {
		return nil, errors.New("unsubscribe.keys is empty: give at least one key (file:PATH or env:NAME, 32 bytes or more; " +
			"head -c 32 /dev/urandom | base64 > /etc/postino/unsubscribe.key)")
	}
	keys, err := unsubscribe.LoadKeys(c.Unsubscribe.Grace.D(), c.Unsubscribe.Keys)
	if err != nil {
		return nil, fmt.Errorf("unsubscribe.keys: %w", err)
	}
	return keys, nil
}

// checkUnsubscribe checks what serve reads of the unsubscribe settings.
func (c *Config) checkUnsubscribe() error {
	u := c.Unsubscribe
	if u.BaseURL == "" && u.Listen == "" {
		return nil
	}
	if b, err := url.Parse(u.BaseURL); err != nil || b.Scheme != "https" || b.Host == "" || b.RawQuery != "" || b.Fragment != "" ||
		len(u.BaseURL) > 200 || strings.ContainsAny(u.BaseURL, " <>\"") {
		return fmt.Errorf("unsubscribe.base_url %q: give the https: URL your ingress serves the listener at (RFC 8058 wants https), "+
			"with no query, at most 200 characters: it goes into every bulk message's List-Unsubscribe", u.BaseURL)
	}
	if u.Listen != "" {
		if _, _, err := net.SplitHostPort(u.Listen); err != nil {
			return fmt.Errorf("unsubscribe.listen %q is not a host:port address: %v", u.Listen, err)
		}
	}
	if u.Mailto != "" {
		if a, err := mail.ParseAddress(u.Mailto); err != nil || a.Address != u.Mailto || len(u.Mailto) > 200 {
			return fmt.Errorf("unsubscribe.mailto %q: give a bare address (local@domain) of a bounce mailbox", u.Mailto)
		}
	}
	if u.Rate <= 0 || u.Burst <= 0 {
		return errors.New("unsubscribe.rate and unsubscribe.burst must be positive: the listener faces the internet")
	}
	_, err := c.trustedProxies()
	return err
}

func (c *Config) trustedProxies() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range c.Unsubscribe.TrustedProxies {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("unsubscribe.trusted_proxies %q is not a network (CIDR, as 10.0.0.0/8): %v", s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// Bulk reports whether a stream's messages get the fields.
func (u *unsubscribes) Bulk(stream string) bool { return u.policy.Stream(stream).Bulk }

// Fields are a recipient's List-Unsubscribe and List-Unsubscribe-Post,
// folded after the comma between the https: and mailto: URIs; none when
// the token cannot be made.
func (u *unsubscribes) Fields(stream, rcpt, messageID string) []byte {
	lu, post := u.keys.Headers(unsubscribe.Target{Stream: stream, Recipient: rcpt, MessageID: messageID}, u.cfg.BaseURL, u.cfg.Mailto, time.Now())
	if lu == "" {
		return nil
	}
	return []byte("List-Unsubscribe: " + strings.ReplaceAll(lu, ">, <", ">,\r\n <") + "\r\nList-Unsubscribe-Post: " + post + "\r\n")
}

// Unsubscribe suppresses the recipient for the stream and tells the
// plugins, on the message, when the outbox still holds it.
func (u *unsubscribes) Unsubscribe(ctx context.Context, r unsubscribe.Request) error {
	ev := suppression.Evidence{MessageID: r.MessageID, Diagnostic: "unsubscribed by " + r.Via}
	if _, err := u.policy.Unsubscribe(ctx, r.Stream, r.Recipient, ev, r.At); err != nil {
		return err
	}
	u.count.WithLabelValues(r.Via).Inc()
	e := backends.OutcomeEvent("", EventUnsubscribed, fmt.Sprintf("%s unsubscribed from %s by %s", r.Recipient, r.Stream, r.Via),
		map[string]any{"unsubscribe": outcome.Unsubscribe{Recipient: r.Recipient, Stream: r.Stream, Via: r.Via, At: r.At}})
	e.MessageID, e.At = r.MessageID, r.At
	// One event per recipient and way: a second click is the same event.
	e.ID = uuid.NewSHA1(unsubscribeNamespace, []byte(r.MessageID+"\x00"+r.Stream+"\x00"+r.Recipient+"\x00"+r.Via)).String()
	switch err := u.events.AddEvent(ctx, e); {
	case errors.Is(err, backends.ErrDuplicate):
		return nil // told already: a second click
	case errors.Is(err, backends.ErrNotFound):
		// Events belong to messages, and retention removed this one: the
		// entry is what counts, and the log says so.
		u.log.Info("unsubscribed; its message is gone (retention), so the plugins hear no UNSUBSCRIBED event",
			"stream", r.Stream, "recipient", r.Recipient, "message_id", r.MessageID, "via", r.Via)
		return nil
	case err != nil:
		return err
	}
	if u.wake != nil {
		u.wake()
	}
	return nil
}

// FromMail honours the unsubscribe a mail's subject carries.
func (u *unsubscribes) FromMail(ctx context.Context, subject string) (bool, error) {
	now := time.Now().UTC()
	t, err := u.keys.FromMail(subject, now)
	if err != nil {
		return false, nil
	}
	return true, u.Unsubscribe(ctx, unsubscribe.Request{Target: t, At: now, Via: "mailto"})
}

// server is the listener's HTTP server; nil without unsubscribe.listen.
func (u *unsubscribes) server(c *Config, log *slog.Logger) (*http.Server, error) {
	if u == nil || c.Unsubscribe.Listen == "" {
		return nil, nil
	}
	proxies, err := c.trustedProxies()
	if err != nil {
		return nil, err
	}
	h := unsubscribe.NewHandler(unsubscribe.Config{Keys: u.keys, Unsubscriber: u, Rate: c.Unsubscribe.Rate, Burst: c.Unsubscribe.Burst,
		TrustedProxies: proxies, Logger: log})
	// It faces the internet: every step of a request is bounded.
	return &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}, nil
}
