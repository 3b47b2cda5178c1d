package delivery

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	// maxDenials bounds the domains whose "no such domain" answer waits
	// for its confirmation by time. The domains are the recipients',
	// which the senders choose: past the bound the oldest answer is
	// dropped, and its domain's confirmation starts again.
	maxDenials = 10000
	// probeFor is how long an answer to the root's question stands for
	// the lookups that fail after it: the resolvers are not asked it
	// again for each of a newsletter's domains while they are down.
	probeFor = 10 * time.Second
)

// resolution follows the resolvers of MX delivery, for two questions that
// one DNS answer does not settle.
//
// Whether they work: a lookup that fails (SERVFAIL, a timeout) or says a
// domain does not exist may be that domain's trouble or the resolvers'. So
// the resolvers are then asked the question every working resolver
// answers, the root zone's NS records; when they cannot answer that
// either, resolution is failing (one WARN, /readyz degraded under "dns",
// postino_dns_up 0) until a lookup is answered again. One bad domain
// leaves the relay ready.
//
// Whether a domain really does not exist: that answer fails its recipients
// for good (550 5.1.2, a hard verdict the suppression list keeps), so one
// from broken DNS would end a whole newsletter. It is final only once
// confirmed: by a second server of delivery.dns.servers in the same lookup
// (resolver.Client asks one), or by the same answer again at least
// confirmAfter after the first, while the resolvers answer the root's
// question. Until then its recipients wait (451 4.4.3). The first answers
// are kept by domain, at most maxDenials, so that a flood of made-up
// domains can delay a confirmation but never make one.
type resolution struct {
	res          Resolver
	confirmAfter time.Duration
	log          *slog.Logger
	gauge        prometheus.Gauge

	mu       sync.Mutex
	since    time.Time // when resolution began failing; zero while it works
	cause    error     // why: the root's question failed
	last     error     // the last lookup that failed since
	probed   time.Time // when the root's question was last asked
	probeErr error     // and what came of it
	denials  map[string]*list.Element
	order    list.List // of *denial, oldest first
}

// denial is the first "no such domain" answer for a domain.
type denial struct {
	domain string // lower case
	at     time.Time
}

func newResolution(res Resolver, confirmAfter time.Duration, log *slog.Logger, m *Metrics) *resolution {
	m.dnsUp.Set(1)
	return &resolution{res: res, confirmAfter: confirmAfter, log: log, gauge: m.dnsUp, denials: map[string]*list.Element{}}
}

// hosts lists domain's MX hosts, and whether DNSSEC authenticated them
// (mxHosts), or gives the verdict on it, a "no such domain" judged, and
// notes what the lookups say of the resolvers.
func (r *resolution) hosts(ctx context.Context, domain string) ([]string, bool, *Reply, error) {
	hosts, secure, rep, err := mxHosts(ctx, r.res, domain)
	var nd *noDomain
	switch {
	case errors.As(err, &nd):
		v := r.judge(ctx, nd)
		return nil, false, &v, nil
	case err != nil:
		r.failed(ctx, err)
	default:
		r.answered(domain)
	}
	return hosts, secure, rep, err
}

// addresses are host's, the lookup noted.
func (r *resolution) addresses(ctx context.Context, host string) ([]net.IPAddr, error) {
	ips, err := r.res.LookupIPAddr(ctx, host)
	if err != nil && !dnsNotFound(err) {
		r.failed(ctx, err)
	} else {
		r.answered("")
	}
	return ips, err
}

// judge gives the verdict on a domain DNS said has no host for its mail:
// final once confirmed, temporary until then. Neither confirmation counts
// while the resolvers cannot answer the root's question: two servers
// broken alike would confirm each other.
func (r *resolution) judge(ctx context.Context, nd *noDomain) Reply {
	now := time.Now()
	first, known := r.deny(nd.domain, now)
	due := first.Add(r.confirmAfter)
	switch {
	case ctx.Err() != nil:
		// The shutdown: the job is handed back, whatever this says.
	case nd.confirmedBy != "" && r.probe(ctx, false) == nil:
		r.log.Info("delivery: a second DNS server says too that the domain does not exist: its recipients fail",
			"domain", nd.domain, "confirmed_by", nd.confirmedBy)
		return verdict(550, "5.1.2", "%s; %s says so too", nd, nd.confirmedBy)
	case known && !now.Before(due) && r.probe(ctx, true) == nil:
		r.log.Info("delivery: DNS says again that the domain does not exist, and answers the root's question: its recipients fail",
			"domain", nd.domain, "first", first.UTC().Format(time.RFC3339))
		return verdict(550, "5.1.2", "%s; DNS said so at %s too", nd, first.UTC().Format(time.RFC3339))
	case !known:
		r.log.Warn("delivery: DNS says the domain does not exist; its recipients wait until that is confirmed",
			"domain", nd.domain, "error", nd.err, "confirm_from", due.UTC().Format(time.RFC3339))
		r.failed(ctx, nd)
	default:
		r.failed(ctx, nd)
	}
	return verdict(451, "4.4.3", "DNS says %s; its recipients fail only once a second DNS server, or the same answer from %s on, confirms it: "+
		"the message waits", nd, due.UTC().Format(time.RFC3339))
}

// deny notes that DNS said domain does not exist, and returns when it
// first said so, and whether it had before.
func (r *resolution) deny(domain string, now time.Time) (time.Time, bool) {
	key := strings.ToLower(domain)
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.denials[key]; ok {
		return e.Value.(*denial).at, true
	}
	if r.order.Len() >= maxDenials {
		oldest := r.order.Front()
		delete(r.denials, oldest.Value.(*denial).domain)
		r.order.Remove(oldest)
	}
	r.denials[key] = r.order.PushBack(&denial{domain: key, at: now})
	return now, false
}

// answered notes a lookup the resolvers answered: domain, when not empty,
// has hosts for its mail, or a final verdict, and its denial is forgotten.
func (r *resolution) answered(domain string) {
	r.mu.Lock()
	if e, ok := r.denials[strings.ToLower(domain)]; ok {
		delete(r.denials, e.Value.(*denial).domain)
		r.order.Remove(e)
	}
	if r.probeErr != nil {
		// The root's question may be answered now too.
		r.probed = time.Time{}
	}
	r.mu.Unlock()
	r.recovered()
}

// failed notes a lookup that failed, or said that a domain does not exist
// unconfirmed: that domain's trouble, unless the resolvers cannot answer
// the root's question either.
func (r *resolution) failed(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	cause := r.probe(ctx, false)
	if cause == nil || ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	r.last = err
	start := r.since.IsZero()
	if start {
		r.since, r.cause = time.Now(), cause
	}
	r.mu.Unlock()
	if start {
		r.gauge.Set(0)
		r.log.Warn("delivery: DNS resolution failing: the resolvers cannot answer the root zone's NS question either; mail to MX hosts waits",
			"error", err, "root_error", cause)
	}
}

// recovered ends a failure of resolution.
func (r *resolution) recovered() {
	r.mu.Lock()
	since := r.since
	r.since, r.cause, r.last = time.Time{}, nil, nil
	r.mu.Unlock()
	if since.IsZero() {
		return
	}
	r.gauge.Set(1)
	r.log.Warn("delivery: DNS resolution works again", "down_for", time.Since(since).Round(time.Millisecond))
}

// probe asks the resolvers the question every working resolver answers,
// the root zone's NS records, unless they answered it within probeFor and
// fresh is false.
func (r *resolution) probe(ctx context.Context, fresh bool) error {
	r.mu.Lock()
	if !fresh && !r.probed.IsZero() && time.Since(r.probed) < probeFor {
		err := r.probeErr
		r.mu.Unlock()
		return err
	}
	r.mu.Unlock()
	ns, err := r.res.LookupNS(ctx, ".")
	if err == nil && len(ns) == 0 {
		err = errors.New("no NS record")
	}
	if err != nil {
		err = fmt.Errorf("the root zone's NS question: %w", err)
	}
	if ctx.Err() != nil {
		// Cut short by the shutdown: it says nothing of the resolvers.
		return err
	}
	r.mu.Lock()
	r.probed, r.probeErr = time.Now(), err
	r.mu.Unlock()
	if err == nil {
		r.recovered()
	}
	return err
}

// err says why resolution fails, or is nil while it works.
func (r *resolution) err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.since.IsZero() {
		return nil
	}
	return fmt.Errorf("failing since %s: the resolvers cannot answer %v; the last lookup that failed: %v; "+
		"mail to MX hosts waits, and no domain is found not to exist meanwhile: check delivery.dns.servers, or the system's resolver (/etc/resolv.conf)",
		r.since.UTC().Format(time.RFC3339), r.cause, r.last)
}
