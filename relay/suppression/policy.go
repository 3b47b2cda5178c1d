// Package suppression is the relay's policy over the suppression list
// (backends.Suppressions): which stream a message belongs to, which of its
// recipients the list holds back, and what the relay's findings (a hard
// verdict, a complaint, an unsubscribe) add to it.
package suppression

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/text"
	"github.com/genropy/postino/outcome"
)

// HeaderStream is the control header naming a message's stream.
const HeaderStream = "X-Postino-Stream"

// Transactional is the stream of a message that names none, on a route
// that names none.
const Transactional = "transactional"

// Modes of a stream's intake check.
const (
	// ModeRecord takes the message; its suppressed recipients end
	// suppressed, and are never sent.
	ModeRecord = "record"
	// ModeRefuse answers RCPT of a suppressed recipient with a 5xx.
	ModeRefuse = "refuse"
)

// Store is what the policy needs of the outbox.
type Store interface {
	Suppress(ctx context.Context, c backends.SuppressionChange) (backends.Suppression, error)
	Suppressed(ctx context.Context, stream string, addrs []string, now time.Time) ([]backends.Suppression, error)
}

// Stream is a kind of mail with its own settings.
type Stream struct {
	// Bulk streams get the one-click unsubscribe headers.
	Bulk bool
	// Mode is ModeRecord or ModeRefuse.
	Mode string
	// Blocks lists the reasons whose entries hold the stream's mail back;
	// a hard bounce always does.
	Blocks []backends.SuppressionReason
}

// Rule says when a finding suppresses an address: after Need findings
// within Within (1: at once), for Expires (0: until an operator removes it).
type Rule struct {
	Off     bool
	Need    int
	Within  time.Duration
	Expires time.Duration
}

// Config is the policy.
type Config struct {
	// Streams by name; Transactional is there even when not configured.
	Streams map[string]Stream
	// RouteStreams names the stream of a route's messages that name none.
	RouteStreams map[string]string
	// Choose names the route of a message that has none yet (at RCPT).
	Choose func(m *backends.Message) (string, error)
	// HardBounce and Complaint are the rules of the findings.
	HardBounce Rule
	Complaint  Rule
	// By names this relay in the list's history.
	By string
	// Held, when set, counts the recipients held back, by stream.
	Held *prometheus.CounterVec
}

// NewHeldCounter registers the series of the recipients held back.
func NewHeldCounter(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "postino_recipients_suppressed_total",
		Help: "Recipients held back by the suppression list (never sent), by stream."}, []string{"stream"})
	reg.MustRegister(c)
	return c
}

// Policy applies the configuration to the outbox's list.
type Policy struct {
	cfg     Config
	store   Store
	lookups *lookups
}

// New makes the policy; cfg's streams are checked by the relay's
// configuration.
func New(cfg Config, store Store) *Policy {
	if cfg.Streams == nil {
		cfg.Streams = map[string]Stream{}
	}
	if _, ok := cfg.Streams[Transactional]; !ok {
		cfg.Streams[Transactional] = Stream{Mode: ModeRecord}
	}
	return &Policy{cfg: cfg, store: store, lookups: newLookups(store)}
}

// Close ends the policy's reads of the list, once those asked are
// answered; the policy must not be used afterwards.
func (p *Policy) Close() { p.lookups.Close() }

// Known reports whether a stream is configured.
func (p *Policy) Known(name string) bool {
	_, ok := p.cfg.Streams[name]
	return ok
}

// StreamOf is m's stream: its control header, else its route's, else
// Transactional. route is the message's route where m does not carry it
// yet (the intake worker's choice).
func (p *Policy) StreamOf(m *backends.Message, route string) string {
	if s := m.Envelope.Control[HeaderStream]; s != "" {
		return s
	}
	if route == "" {
		route = m.Route
	}
	if route == "" && p.cfg.Choose != nil {
		route, _ = p.cfg.Choose(m)
	}
	if s := p.cfg.RouteStreams[route]; s != "" {
		return s
	}
	return Transactional
}

// Stream returns a stream's settings.
func (p *Policy) Stream(name string) Stream { return p.cfg.Streams[name] }

// Hold marks the pending recipients of results that the list holds back
// from stream at now: one lookup for them all. It returns the results
// (a copy when any changed) and how many it marked.
func (p *Policy) Hold(ctx context.Context, stream string, results []outcome.Recipient, now time.Time) ([]outcome.Recipient, int, error) {
	var pending []string
	for _, r := range results {
		if r.Status == outcome.RecipientPending {
			pending = append(pending, r.Address)
		}
	}
	if len(pending) == 0 {
		return results, 0, nil
	}
	entries, err := p.Blocking(ctx, stream, pending, now)
	if err != nil || len(entries) == 0 {
		return results, 0, err
	}
	blocking := make(map[string]backends.Suppression, len(entries))
	for _, e := range entries {
		blocking[e.Key] = e
	}
	out := slices.Clone(results)
	n := 0
	for i := range out {
		r := &out[i]
		if r.Status != outcome.RecipientPending {
			continue
		}
		key, err := backends.SuppressionKey(r.Address)
		if e, ok := blocking[key]; err == nil && ok {
			r.Status, r.Verdict, r.Code, r.EnhancedCode, r.Host = outcome.RecipientSuppressed, "", 0, "", ""
			r.Text, r.At = Explain(e), now
			n++
		}
	}
	if p.cfg.Held != nil {
		p.cfg.Held.WithLabelValues(stream).Add(float64(n))
	}
	return out, n, nil
}

// Blocking returns the entries that hold mail of stream to addrs back at
// now: those the list has for the stream whose reason the stream's
// Blocks names (a hard bounce always does). Concurrent callers share one
// read of the list (lookups).
func (p *Policy) Blocking(ctx context.Context, stream string, addrs []string, now time.Time) ([]backends.Suppression, error) {
	entries, err := p.lookups.Suppressed(ctx, stream, addrs, now)
	if err != nil {
		return nil, fmt.Errorf("look up the suppression list: %w", err)
	}
	blocks := p.cfg.Streams[stream].Blocks
	return slices.DeleteFunc(entries, func(e backends.Suppression) bool {
		return e.Reason != backends.ReasonHardBounce && len(blocks) > 0 && !slices.Contains(blocks, e.Reason)
	}), nil
}

// Explain says why an entry holds mail back: its reason, scope and time,
// for the app's history and events (never in a reply to the network).
func Explain(e backends.Suppression) string {
	scope := "every stream"
	if e.Scope != backends.ScopeAll {
		scope = "stream " + e.Scope
	}
	return fmt.Sprintf("suppressed for %s since %s: %s", scope, e.Created.UTC().Format(time.RFC3339), e.Reason)
}

// Refused returns the entry that refuses addr at RCPT of m, a message
// whose envelope is being given, when the stream m gets without a header
// of its own (its route's) refuses suppressed recipients; nil otherwise.
// Only an entry of every stream refuses: at RCPT the message's header is
// not read yet, and it may name another stream (a password reset sent
// through a newsletter's route), so an entry of one stream holds its
// recipients back later, as ModeRecord does.
func (p *Policy) Refused(ctx context.Context, m *backends.Message, addr string, now time.Time) (*backends.Suppression, error) {
	stream := p.StreamOf(m, "")
	if p.cfg.Streams[stream].Mode != ModeRefuse {
		return nil, nil
	}
	entries, err := p.Blocking(ctx, stream, []string{addr}, now)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.Scope == backends.ScopeAll {
			return &e, nil
		}
	}
	return nil, nil
}

// Evidence is what a finding rests on.
type Evidence struct {
	MessageID  string
	Code       string
	Diagnostic string
	ReportID   string
}

// Hard records a hard verdict on addr: it suppresses every stream, as the
// HardBounce rule says.
func (p *Policy) Hard(ctx context.Context, addr string, ev Evidence, now time.Time) (backends.Suppression, error) {
	return p.apply(ctx, p.cfg.HardBounce, backends.ReasonHardBounce, backends.ScopeAll, addr, ev, now)
}

// Complaint records a complaint of addr about a message of stream.
func (p *Policy) Complaint(ctx context.Context, stream, addr string, ev Evidence, now time.Time) (backends.Suppression, error) {
	return p.apply(ctx, p.cfg.Complaint, backends.ReasonComplaint, stream, addr, ev, now)
}

// Unsubscribe records addr's unsubscribe from stream: at once, for good.
func (p *Policy) Unsubscribe(ctx context.Context, stream, addr string, ev Evidence, now time.Time) (backends.Suppression, error) {
	return p.apply(ctx, Rule{Need: 1}, backends.ReasonUnsubscribe, stream, addr, ev, now)
}

func (p *Policy) apply(ctx context.Context, r Rule, reason backends.SuppressionReason, scope, addr string, ev Evidence, now time.Time) (backends.Suppression, error) {
	if r.Off {
		return backends.Suppression{}, nil
	}
	c := backends.SuppressionChange{
		Entry: backends.Suppression{Address: addr, Scope: scope, Reason: reason, MessageID: ev.MessageID, Code: ev.Code,
			Diagnostic: text.Cut(ev.Diagnostic, 500), ReportID: ev.ReportID, Created: now},
		By: p.cfg.By, Need: r.Need, Within: r.Within,
	}
	if r.Expires > 0 {
		c.Entry.Expires = now.Add(r.Expires)
	}
	if err := c.Check(); err != nil {
		return backends.Suppression{}, err
	}
	e, err := p.store.Suppress(ctx, c)
	if err != nil {
		return e, fmt.Errorf("suppress %s (%s): %w", addr, reason, err)
	}
	return e, nil
}
