package mtasts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/genropy/postino/backends"
)

const (
	// maxPolicy bounds a policy's body (section 3.3: 64 KiB).
	maxPolicy = 64 << 10
	// maxDomains bounds the domains remembered in memory: they are the
	// recipients', which senders choose. Past it the memory starts over,
	// and the store still holds the policies.
	maxDomains = 10000
	// keyPrefix names the policies among the store's documents.
	keyPrefix = "mta-sts/"
)

// Result types of a TLS report (RFC 8460 section 4.3) for a policy that
// could not be had.
const (
	ResultFetchError    = "sts-policy-fetch-error"
	ResultPolicyInvalid = "sts-policy-invalid"
	ResultWebPKIInvalid = "sts-webpki-invalid"
)

// Resolver answers the questions of MTA-STS: *net.Resolver and the
// relay's resolver.Client are ones.
type Resolver interface {
	LookupTXT(ctx context.Context, name string) ([]string, error)
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// Store keeps the policies for every relay that shares it.
type Store interface {
	GetDocument(ctx context.Context, key string) (backends.Document, error)
	PutDocument(ctx context.Context, d backends.Document) error
}

// Options shape a Cache.
type Options struct {
	// Roots are the authorities a policy host's certificate must chain
	// to; nil for the system's.
	Roots *x509.CertPool
	// Port is the policy hosts' HTTPS port: 443; tests change it.
	Port int
	// Timeout bounds a fetch, its connection and its body.
	Timeout time.Duration
	// Recheck is how often a domain's TXT record is asked again while
	// its policy holds: a new id there is a new policy to fetch.
	Recheck time.Duration
}

// FetchError says why a domain has no policy to apply, when it announced
// one: Result is its TLS report's result type.
type FetchError struct {
	Domain string
	Result string
	Err    error
}

func (e *FetchError) Error() string {
	return fmt.Sprintf("MTA-STS policy of %s: %v", e.Domain, e.Err)
}

func (e *FetchError) Unwrap() error { return e.Err }

// Cache gives the policies of recipient domains: from memory, from the
// store that relays share, or fetched, and fetched again before they
// expire or when the TXT record's id changes.
type Cache struct {
	opts   Options
	res    Resolver
	store  Store
	log    *slog.Logger
	client *http.Client
	now    func() time.Time

	mu       sync.Mutex
	known    map[string]*entry        // by domain
	fetching map[string]chan struct{} // by domain, closed when done
}

// entry is what memory holds of a domain.
type entry struct {
	policy  *Policy // nil: none
	err     error   // why none, where the domain announced one
	checked time.Time
}

// New is a cache over res and store.
func New(opts Options, res Resolver, store Store, log *slog.Logger) *Cache {
	c := &Cache{opts: opts, res: res, store: store, log: log, now: time.Now,
		known: map[string]*entry{}, fetching: map[string]chan struct{}{}}
	dialer := &net.Dialer{Timeout: opts.Timeout}
	c.client = &http.Client{
		Timeout: opts.Timeout,
		// A policy is served at its URL, not elsewhere (section 3.3).
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("the policy host redirects, which RFC 8461 forbids")
		},
		Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: opts.Roots, MinVersion: tls.VersionTLS12},
			// The policy host's addresses are the relay's resolver's, as
			// the MX hosts' are.
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				host, _, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				ips, err := res.LookupIPAddr(ctx, host)
				if err != nil {
					return nil, err
				}
				var errs []error
				for _, ip := range ips {
					conn, err := dialer.DialContext(ctx, network, net.JoinHostPort(ip.IP.String(), strconv.Itoa(opts.Port)))
					if err == nil {
						return conn, nil
					}
					errs = append(errs, err)
				}
				return nil, fmt.Errorf("%s: %w", host, errors.Join(errs...))
			},
			MaxIdleConns: 10, IdleConnTimeout: time.Minute, ResponseHeaderTimeout: opts.Timeout,
		},
	}
	return c
}

// Policy returns domain's policy, nil when it has none; a *FetchError
// when it announces one that cannot be had, and none is cached.
func (c *Cache) Policy(ctx context.Context, domain string) (*Policy, error) {
	domain = strings.TrimSuffix(strings.ToLower(domain), ".")
	for {
		c.mu.Lock()
		e := c.known[domain]
		if e != nil && c.fresh(e) {
			c.mu.Unlock()
			return e.policy, e.err
		}
		if wait, busy := c.fetching[domain]; busy {
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		c.fetching[domain] = done
		c.mu.Unlock()

		var held *Policy
		if e != nil {
			held = e.policy
		}
		next := c.refresh(ctx, domain, held)
		c.mu.Lock()
		if len(c.known) >= maxDomains {
			clear(c.known)
		}
		c.known[domain] = next
		delete(c.fetching, domain)
		close(done)
		c.mu.Unlock()
		return next.policy, next.err
	}
}

// fresh reports whether e stands without asking DNS again.
func (c *Cache) fresh(e *entry) bool {
	now := c.now()
	if now.Sub(e.checked) >= c.opts.Recheck {
		return false
	}
	return e.policy == nil || now.Before(refreshAt(e.policy))
}

// refreshAt is when a policy is fetched again, before it expires: a
// tenth of its max_age before.
func refreshAt(p *Policy) time.Time { return p.Expires().Add(-p.MaxAge / 10) }

// refresh asks the TXT record, and fetches the policy it announces unless
// held (what memory held, else what the store does) is that policy and
// not due.
func (c *Cache) refresh(ctx context.Context, domain string, held *Policy) *entry {
	now := c.now()
	if held == nil || !now.Before(held.Expires()) {
		held = c.stored(ctx, domain, now)
	}
	e := &entry{checked: now}
	id, err := c.txt(ctx, domain)
	switch {
	case err != nil && held != nil:
		// No record, or none to be had: a policy still valid stays
		// (section 5.1).
		e.policy = held
		return e
	case errors.Is(err, errNoRecord):
		return e
	case err != nil:
		e.err = &FetchError{Domain: domain, Result: ResultFetchError, Err: err}
		return e
	case held != nil && held.ID == id && now.Before(refreshAt(held)):
		e.policy = held
		return e
	}
	if stored := c.stored(ctx, domain, now); stored != nil && stored.ID == id && now.Before(refreshAt(stored)) {
		// Another relay fetched it meanwhile.
		e.policy = stored
		return e
	}
	p, err := c.fetch(ctx, domain)
	if err != nil {
		c.log.Warn("delivery: MTA-STS: the domain's policy could not be fetched", "domain", domain, "id", id, "error", err)
		if held != nil && now.Before(held.Expires()) {
			e.policy = held
			return e
		}
		e.err = err
		return e
	}
	p.ID, p.Domain, p.Fetched = id, domain, now
	b, _ := json.Marshal(p)
	if err := c.store.PutDocument(ctx, backends.Document{Key: keyPrefix + domain, Value: b, Expires: p.Expires()}); err != nil {
		c.log.Warn("delivery: MTA-STS: the policy could not be stored for the other relays; it is kept in memory", "domain", domain, "error", err)
	}
	c.log.Info("delivery: MTA-STS: policy fetched", "domain", domain, "id", id, "mode", p.Mode, "mx", p.MX, "max_age", p.MaxAge)
	e.policy = p
	return e
}

// stored is the store's policy of domain that holds at now, or nil.
func (c *Cache) stored(ctx context.Context, domain string, now time.Time) *Policy {
	d, err := c.store.GetDocument(ctx, keyPrefix+domain)
	if err != nil {
		if !errors.Is(err, backends.ErrNotFound) {
			c.log.Warn("delivery: MTA-STS: the stored policy could not be read", "domain", domain, "error", err)
		}
		return nil
	}
	var p Policy
	if err := json.Unmarshal(d.Value, &p); err != nil || !now.Before(p.Expires()) {
		return nil
	}
	return &p
}

// errNoRecord: the domain publishes no MTA-STS record.
var errNoRecord = errors.New("no _mta-sts TXT record")

// txt is the id of domain's _mta-sts record (section 3.1); errNoRecord
// when there is none, or more than one (as there is then no telling which
// holds).
func (c *Cache) txt(ctx context.Context, domain string) (string, error) {
	name := "_mta-sts." + domain
	txts, err := c.res.LookupTXT(ctx, name)
	var de *net.DNSError
	if errors.As(err, &de) && de.IsNotFound {
		return "", errNoRecord
	}
	if err != nil {
		return "", fmt.Errorf("the TXT question %s failed: %w", name, err)
	}
	var ids []string
	for _, t := range txts {
		id, ok, err := record(t)
		if err != nil {
			return "", err
		}
		if ok {
			ids = append(ids, id)
		}
	}
	if len(ids) != 1 {
		return "", errNoRecord
	}
	return ids[0], nil
}

// fetch gets domain's policy from its policy host (section 3.3): HTTPS
// with a certificate valid for mta-sts.<domain>, status 200, no
// redirect, text/plain, at most 64 KiB.
func (c *Cache) fetch(ctx context.Context, domain string) (*Policy, error) {
	url := "https://mta-sts." + domain + "/.well-known/mta-sts.txt"
	fail := func(result string, err error) (*Policy, error) {
		return nil, &FetchError{Domain: domain, Result: result, Err: fmt.Errorf("%s: %w", url, err)}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fail(ResultFetchError, err)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		var (
			unknown  x509.UnknownAuthorityError
			hostname x509.HostnameError
			invalid  x509.CertificateInvalidError
			verify   *tls.CertificateVerificationError
		)
		if errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) {
			return fail(ResultWebPKIInvalid, err)
		}
		return fail(ResultFetchError, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fail(ResultFetchError, fmt.Errorf("status %s, want 200", resp.Status))
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/plain" {
		return fail(ResultPolicyInvalid, fmt.Errorf("content type %q, want text/plain", resp.Header.Get("Content-Type")))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxPolicy+1))
	if err != nil {
		return fail(ResultFetchError, err)
	}
	if len(body) > maxPolicy {
		return fail(ResultPolicyInvalid, fmt.Errorf("over %d bytes", maxPolicy))
	}
	p, err := Parse(string(body))
	if err != nil {
		return fail(ResultPolicyInvalid, err)
	}
	return p, nil
}
