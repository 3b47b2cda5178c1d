// Package tlsrpt is SMTP TLS reporting (RFC 8460): the relays count each
// MX session's TLS result by policy domain into the store they share, each
// under rows of its own, and once a day one of them sums the fleet's
// counts into a report for every domain that asks for one (its
// _smtp._tls TXT record's rua), by mail through the relay or by HTTPS.
package tlsrpt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/genropy/postino/backends"
)

// Policy types (RFC 8460 section 4.3.1).
const (
	TypeSTS      = "sts"
	TypeTLSA     = "tlsa"
	TypeNoPolicy = "no-policy-found"
)

// Result types of failed sessions (section 4.3.2.1); the MTA-STS fetch's
// are mtasts.Result*.
const (
	ResultSTARTTLSNotSupported = "starttls-not-supported"
	ResultHostMismatch         = "certificate-host-mismatch"
	ResultExpired              = "certificate-expired"
	ResultNotTrusted           = "certificate-not-trusted"
	ResultValidationFailure    = "validation-failure"
	ResultTLSAInvalid          = "tlsa-invalid"
	ResultDNSSECInvalid        = "dnssec-invalid"
	ResultDANERequired         = "dane-required"
)

// countsPrefix names the relays' counts among the store's documents:
// countsPrefix + window start + "/" + policy domain + "/" + relay.
const countsPrefix = "tlsrpt/counts/"

// Policy is what judged a session (section 4.4's policy object).
type Policy struct {
	Type   string   `json:"policy-type"`
	String []string `json:"policy-string,omitempty"`
	Domain string   `json:"policy-domain"`
	MXHost []string `json:"mx-host,omitempty"`
}

// Session is one MX session's TLS result.
type Session struct {
	Policy Policy
	// Result is empty for a session whose TLS the policy accepted, else
	// a result type.
	Result                         string
	MXHost, ReceivingIP, SendingIP string
}

// PolicyResult is a policy's counts, as a report gives them.
type PolicyResult struct {
	Policy   Policy    `json:"policy"`
	Summary  Summary   `json:"summary"`
	Failures []Failure `json:"failure-details,omitempty"`
}

// Summary counts a policy's sessions.
type Summary struct {
	Success int64 `json:"total-successful-session-count"`
	Failure int64 `json:"total-failure-session-count"`
}

// Failure counts the failed sessions alike.
type Failure struct {
	ResultType  string `json:"result-type"`
	SendingIP   string `json:"sending-mta-ip,omitempty"`
	MXHost      string `json:"receiving-mx-hostname,omitempty"`
	ReceivingIP string `json:"receiving-ip,omitempty"`
	Count       int64  `json:"failed-session-count"`
}

// counts are a domain's results in one window.
type counts struct {
	Policies []PolicyResult `json:"policies"`
}

// add adds r's counts.
func (c *counts) add(r PolicyResult) {
	key, _ := json.Marshal(r.Policy)
	for i := range c.Policies {
		p := &c.Policies[i]
		if k, _ := json.Marshal(p.Policy); string(k) != string(key) {
			continue
		}
		p.Summary.Success += r.Summary.Success
		p.Summary.Failure += r.Summary.Failure
	next:
		for _, f := range r.Failures {
			for j := range p.Failures {
				if g := &p.Failures[j]; g.ResultType == f.ResultType && g.SendingIP == f.SendingIP && g.MXHost == f.MXHost && g.ReceivingIP == f.ReceivingIP {
					g.Count += f.Count
					continue next
				}
			}
			p.Failures = append(p.Failures, f)
		}
		return
	}
	c.Policies = append(c.Policies, PolicyResult{Policy: r.Policy, Summary: r.Summary, Failures: append([]Failure(nil), r.Failures...)})
}

// Store keeps the counts for the whole fleet.
type Store interface {
	GetDocument(ctx context.Context, key string) (backends.Document, error)
	PutDocument(ctx context.Context, d backends.Document) error
	ListDocuments(ctx context.Context, prefix string) ([]backends.Document, error)
}

// Tally counts this relay's sessions in memory, and writes them to the
// store (Flush): one document per window, policy domain and relay, which
// only this relay writes, so relays never contend for a row.
type Tally struct {
	owner  string
	period time.Duration
	store  Store
	log    *slog.Logger
	now    func() time.Time

	mu     sync.Mutex
	counts map[windowDomain]*counts
	dirty  map[windowDomain]bool
	loaded map[windowDomain]bool // its document's earlier counts were read back
}

// windowDomain names a domain's counts in one window.
type windowDomain struct {
	start  time.Time
	domain string
}

// NewTally counts for owner, the relay's name, in windows of period (a
// day, as the RFC asks).
func NewTally(owner string, period time.Duration, store Store, log *slog.Logger) *Tally {
	return &Tally{owner: owner, period: period, store: store, log: log, now: time.Now,
		counts: map[windowDomain]*counts{}, dirty: map[windowDomain]bool{}, loaded: map[windowDomain]bool{}}
}

// Count counts one session.
func (t *Tally) Count(s Session) {
	k := windowDomain{start: t.now().UTC().Truncate(t.period), domain: strings.ToLower(s.Policy.Domain)}
	r := PolicyResult{Policy: s.Policy, Summary: Summary{Success: 1}}
	if s.Result != "" {
		r.Summary = Summary{Failure: 1}
		r.Failures = []Failure{{ResultType: s.Result, SendingIP: s.SendingIP, MXHost: s.MXHost, ReceivingIP: s.ReceivingIP, Count: 1}}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.counts[k]
	if c == nil {
		c = &counts{}
		t.counts[k] = c
	}
	c.add(r)
	t.dirty[k] = true
}

// Flush writes what was counted since the last flush: each changed
// document whole, with the counts of this relay's earlier run in it
// added once.
func (t *Tally) Flush(ctx context.Context) error {
	t.mu.Lock()
	var keys []windowDomain
	for k := range t.dirty {
		keys = append(keys, k)
	}
	t.mu.Unlock()
	var errs []error
	for _, k := range keys {
		if err := t.flush(ctx, k); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k.domain, err))
		}
	}
	t.mu.Lock()
	// Windows past the report's (see Reporter) are no longer counted.
	old := t.now().UTC().Truncate(t.period).Add(-2 * t.period)
	for k := range t.counts {
		if k.start.Before(old) && !t.dirty[k] {
			delete(t.counts, k)
			delete(t.loaded, k)
		}
	}
	t.mu.Unlock()
	return errors.Join(errs...)
}

func (t *Tally) flush(ctx context.Context, k windowDomain) error {
	key := countsKey(k.start, k.domain) + t.owner
	t.mu.Lock()
	loaded := t.loaded[k]
	t.mu.Unlock()
	var earlier *counts
	if !loaded {
		d, err := t.store.GetDocument(ctx, key)
		switch {
		case err == nil:
			earlier = &counts{}
			if err := json.Unmarshal(d.Value, earlier); err != nil {
				return fmt.Errorf("counts %s: %w", key, err)
			}
		case !errors.Is(err, backends.ErrNotFound):
			return err
		}
	}
	t.mu.Lock()
	c := t.counts[k]
	if earlier != nil {
		for _, r := range earlier.Policies {
			c.add(r)
		}
	}
	t.loaded[k] = true
	b, err := json.Marshal(c)
	delete(t.dirty, k)
	t.mu.Unlock()
	if err == nil {
		err = t.store.PutDocument(ctx, backends.Document{Key: key, Value: b, Expires: k.start.Add(keep * t.period)})
	}
	if err != nil {
		t.mu.Lock()
		t.dirty[k] = true
		t.mu.Unlock()
	}
	return err
}

// keep is how many periods the counts stay in the store from their
// window's start: the report of a window may be late by a relay's
// restart or a day without one.
const keep = 4

// countsKey is the prefix of the documents of domain's counts in the
// window from start.
func countsKey(start time.Time, domain string) string {
	return countsPrefix + start.UTC().Format("20060102T150405Z") + "/" + domain + "/"
}

// Run flushes every interval until ctx ends, then once more.
func (t *Tally) Run(ctx context.Context, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := t.Flush(ctx); err != nil {
				t.log.Warn("tlsrpt: the TLS report counts could not be written; they are tried again", "error", err)
			}
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			if err := t.Flush(final); err != nil {
				t.log.Warn("tlsrpt: the last TLS report counts could not be written; they are lost", "error", err)
			}
			cancel()
			return
		}
	}
}
