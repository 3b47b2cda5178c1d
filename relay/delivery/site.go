package delivery

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay/delivery/sites"
)

const (
	// siteFor is how long a domain's site, from its MX answer, is kept
	// without asking DNS again.
	siteFor = time.Minute
	// maxSiteDomains bounds the domains whose site is kept; past it the
	// expired ones are dropped, then any.
	maxSiteDomains = 10000
	// maxRoom bounds how long a message handed back for a busy site
	// waits before it is claimed again.
	maxRoom = 5 * time.Minute
)

// site is one site of MX delivery: the MX hosts that recipient domains
// resolve to, or a provider's (sites.Rules). Its limits bound the sessions
// and messages of every domain it serves, and adapt to what it says: AIMD
// shrinks its share of them on throttling signals and grows it back with
// each message accepted. A site whose connections keep failing is down:
// its messages are handed back, and one probe per interval tests it. A
// response rule may suspend it.
type site struct {
	e     *Engine
	rule  sites.Site
	label string // the metrics' name for it

	mu        sync.Mutex
	share     sites.Share
	msgs      *rate.Limiter // messages per minute; nil for none
	hourly    *rate.Limiter // messages per hour; nil for none
	conns     *rate.Limiter // new connections per minute; nil for none
	failed    int           // connection attempts failed in a row
	downSince time.Time     // zero while up
	probeAt   time.Time     // down: when the next probe may go
	probe     time.Duration // down: the interval between probes
	suspended time.Time     // until when, by a response rule
	why       string        // the reply that suspended it
	jobTime   time.Duration // how long a job takes, on average
	// held is until when an operator suspended it, on any relay of the
	// fleet (suspend.go), and by whom; read is when the store was last
	// read for it, reading while a read is on its way.
	held    time.Time
	heldBy  string
	read    time.Time
	reading bool
	// replies are its last replies and connection failures, the latest
	// last.
	replies []SiteReply
	// noSlots is until when its sessions wait for a fleet slot without
	// asking the store: a take found none.
	noSlots time.Time
}

func perMinute(n float64) *rate.Limiter {
	if n <= 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(n/60), 1)
}

// siteOf is the site of a rule, one per key. A site new to the relay
// is read for an operator's suspension before its first job.
func (e *Engine) siteOf(rule sites.Site) (s *site) {
	created := false
	defer func() {
		if created {
			s.readHeld(time.Now(), true)
		}
	}()
	e.mu.Lock()
	defer e.mu.Unlock()
	s = e.sites[rule.Key]
	if s == nil {
		s = &site{e: e, rule: rule, label: e.siteLabel(rule), msgs: perMinute(rule.Limits.MessagesPerMinute),
			conns: perMinute(rule.Limits.ConnectionsPerMinute), probe: e.rules.Down.Probe}
		if n := rule.Limits.MessagesPerHour; n > 0 {
			// An hour's messages spread over it, a minute's worth at once.
			s.hourly = rate.NewLimiter(rate.Limit(n/3600), max(1, int(n/60)))
		}
		s.setRates()
		e.sites[rule.Key] = s
		created = true
	}
	return s
}

// siteLabel names a site in the metrics: its provider, the first
// SiteMetrics sites of no provider by their MX hosts, "other" beyond;
// e.mu is held.
func (e *Engine) siteLabel(rule sites.Site) string {
	switch {
	case rule.Provider != "":
		return rule.Provider
	case e.labelled < e.cfg.SiteMetrics:
		e.labelled++
		return rule.Key
	}
	return "other"
}

// knownSite is domain's site while its MX answer is fresh.
func (e *Engine) knownSite(domain string) *site {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.domains[domain]
	if !ok || time.Now().After(c.until) {
		return nil
	}
	return c.site
}

// route queues job j of route: at once for a smarthost, or a domain whose
// site is known; otherwise, off the claim loop, once the domain's MX
// answer names its site. Jobs of a domain being looked up wait for that
// lookup.
func (e *Engine) route(route *Route, j *job) {
	if !route.MX() {
		e.queueOf(route, nil).enqueue(j)
		return
	}
	if s := e.knownSite(j.domain); s != nil {
		e.queueOf(route, s).enqueue(j)
		return
	}
	e.mu.Lock()
	waiting, looking := e.resolving[j.domain]
	e.resolving[j.domain] = append(waiting, j)
	e.mu.Unlock()
	if !looking {
		go e.resolveSite(route, j.domain)
	}
}

// resolveSite looks up domain's MX hosts, and queues the jobs waiting for
// them to its site, or gives them DNS's verdict.
func (e *Engine) resolveSite(route *Route, domain string) {
	hosts, secure, rep, err := e.dns.hosts(e.abort, domain)
	var s *site
	if rep == nil && err == nil {
		s = e.siteOf(e.rules.Of(hosts))
	}
	e.mu.Lock()
	jobs := e.resolving[domain]
	delete(e.resolving, domain)
	if s != nil {
		if len(e.domains) >= maxSiteDomains {
			e.forgetDomains()
		}
		e.domains[domain] = knownDomain{site: s, hosts: hosts, secure: secure, until: time.Now().Add(siteFor)}
	}
	e.mu.Unlock()
	for _, j := range jobs {
		switch {
		case e.abort.Err() != nil:
			j.interrupt()
		case rep != nil:
			j.fail(domain, *rep)
			j.done()
		case err != nil:
			e.health[route.Name].failure(domain, err)
			j.fail(domain, verdict(451, "4.4.1", "%s", oneLine(err.Error())))
			j.done()
		default:
			e.queueOf(j.f.route, s).enqueue(j)
		}
	}
}

// forgetDomains drops the domains whose site has expired, or, with none,
// half of them; e.mu is held.
func (e *Engine) forgetDomains() {
	now := time.Now()
	for d, c := range e.domains {
		if now.After(c.until) {
			delete(e.domains, d)
		}
	}
	for d := range e.domains {
		if len(e.domains) < maxSiteDomains/2 {
			break
		}
		delete(e.domains, d)
	}
}

// knownDomain is a domain's site, from its MX answer (its hosts, and
// whether DNSSEC authenticated them), until that answer is old.
type knownDomain struct {
	site   *site
	hosts  []string
	secure bool
	until  time.Time
}

// knownHosts are domain's MX hosts while its MX answer is fresh.
func (e *Engine) knownHosts(domain string) (hosts []string, secure, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	c, ok := e.domains[domain]
	if !ok || time.Now().After(c.until) {
		return nil, false, false
	}
	return c.hosts, c.secure, true
}

// sessions is how many sessions the site may have at once now.
func (s *site) sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.share.Sessions(s.rule.Limits.Sessions)
}

// admit says whether a job may wait for the site, which holds queued
// already: when not, why, and how long until it may. A site that is down
// takes one job per probe interval, the probe.
func (s *site) admit(queued int, now time.Time) (string, time.Duration) {
	s.readHeld(now, false)
	s.mu.Lock()
	defer s.mu.Unlock()
	if why := s.closedLocked(now); why != "" {
		if !s.downSince.IsZero() && !now.Before(s.probeAt) && now.After(s.suspended) && now.After(s.held) {
			s.probeAt = now.Add(s.probe)
			return "", 0
		}
		return why, s.reopensLocked(now)
	}
	if limit := s.rule.Limits.MaxQueued; limit > 0 && queued >= limit {
		room := s.roomLocked(queued)
		return fmt.Sprintf("handed back: site %s has %d messages waiting, as many as it may hold (max_queued); claimed again in about %s; the attempt does not count",
			s.rule.Key, queued, room.Round(time.Millisecond)), room
	}
	return "", 0
}

// closed says why the site takes no mail now (down, suspended), or is
// empty.
func (s *site) closed(now time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closedLocked(now)
}

func (s *site) closedLocked(now time.Time) string {
	switch {
	case now.Before(s.held):
		return fmt.Sprintf("handed back: site %s is suspended by %s until %s; the attempt does not count",
			s.rule.Key, s.heldBy, s.held.UTC().Format(time.RFC3339))
	case now.Before(s.suspended):
		return fmt.Sprintf("handed back: site %s is suspended until %s after it replied %q; the attempt does not count",
			s.rule.Key, s.suspended.UTC().Format(time.RFC3339), s.why)
	case !s.downSince.IsZero():
		return fmt.Sprintf("handed back: site %s is down since %s (its last %d connection attempts failed); one probe per %s tests it; the attempt does not count",
			s.rule.Key, s.downSince.UTC().Format(time.RFC3339), s.failed, s.probe)
	}
	return ""
}

// reopensIn is how long until the site may take mail again.
func (s *site) reopensIn(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reopensLocked(now)
}

func (s *site) reopensLocked(now time.Time) time.Duration {
	// A suspension may be resumed, on any relay, before it ends: its
	// mail, handed back, is claimed again within maxRoom to see.
	until := s.suspended
	if s.held.After(until) {
		until = s.held
	}
	wait := min(until.Sub(now), maxRoom)
	if !s.downSince.IsZero() {
		wait = max(wait, s.probeAt.Sub(now))
	}
	return max(wait, time.Second)
}

// roomLocked is about when a site holding queued jobs will have room: as
// its rate, or its sessions at the pace of its last jobs, get through them.
func (s *site) roomLocked(queued int) time.Duration {
	var d time.Duration
	if r := s.share.Rate(s.rule.Limits.MessagesPerMinute); r > 0 {
		d = time.Duration(float64(queued) / r * float64(time.Minute))
	} else {
		d = s.jobTime * time.Duration(queued) / time.Duration(max(1, s.share.Sessions(s.rule.Limits.Sessions)))
	}
	return min(max(d, time.Second), maxRoom)
}

// pace waits for the site's rates to allow a message, or a new connection
// (conn). When the wait would be longer than maxWait, it waits not at all
// and says how long it would have been.
func (s *site) pace(ctx context.Context, conn bool, maxWait time.Duration) (time.Duration, error) {
	s.mu.Lock()
	lims := []*rate.Limiter{s.msgs, s.hourly}
	if conn {
		lims = []*rate.Limiter{s.conns}
	}
	now := time.Now()
	var rs []*rate.Reservation
	var wait time.Duration
	for _, l := range lims {
		if l == nil {
			continue
		}
		r := l.ReserveN(now, 1)
		rs = append(rs, r)
		wait = max(wait, r.DelayFrom(now))
	}
	if wait > maxWait {
		for _, r := range rs {
			r.CancelAt(now)
		}
	}
	s.mu.Unlock()
	if wait > maxWait {
		return wait, nil
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return 0, nil
}

// connected notes a connection the site took: it is up.
func (s *site) connected() {
	s.mu.Lock()
	since := s.downSince
	s.failed, s.downSince, s.probe = 0, time.Time{}, s.e.rules.Down.Probe
	s.mu.Unlock()
	if since.IsZero() {
		return
	}
	s.e.metrics.sitesDown.WithLabelValues(s.label).Dec()
	s.e.log.Warn("delivery: site up again: a probe connected", "site", s.rule.Key, "down_for", time.Since(since).Round(time.Millisecond))
}

// connectFailed notes a connection attempt that failed: a reply refusing
// it is the site's word (a throttling signal, a response rule); a network
// failure counts towards the site being down, and refused, reset or timed
// out, or a TLS handshake that failed, is a throttling signal too.
func (s *site) connectFailed(err error) {
	var re *replyError
	if errors.As(err, &re) {
		s.heard(re.Reply.String())
		s.replied(re.Reply)
		return
	}
	s.heard(oneLine(err.Error()))
	if !unreachable(err) {
		return
	}
	s.throttle()
	now := time.Now()
	s.mu.Lock()
	s.failed++
	down := s.downSince.IsZero() && s.failed >= s.e.cfg.DownAfter
	switch {
	case down:
		s.downSince, s.probeAt = now, now.Add(s.probe)
	case !s.downSince.IsZero():
		// A probe failed.
		s.probe = min(2*s.probe, s.e.rules.Down.ProbeMax)
		s.probeAt = now.Add(s.probe)
	}
	n, probe := s.failed, s.probe
	s.mu.Unlock()
	if down {
		s.e.metrics.sitesDown.WithLabelValues(s.label).Inc()
		s.e.log.Warn("delivery: site down: its MX hosts take no connection; its mail waits, handed back, and one probe per interval tests it",
			"site", s.rule.Key, "failed_attempts", n, "probe_every", probe, "error", err)
	}
}

// unreachable reports whether err is the network's: refused, reset,
// timed out, or a TLS handshake that failed.
func unreachable(err error) bool {
	var ne net.Error
	var alert tls.AlertError
	var rec tls.RecordHeaderError
	var cert *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	return errors.As(err, &ne) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &alert) || errors.As(err, &rec) || errors.As(err, &cert) || errors.As(err, &unknown)
}

// throttling reports whether a reply asks the sender to slow down: 421,
// or a 4.7.x code (rate, reputation).
func throttling(r Reply) bool {
	return r.Code == 421 || r.Code >= 400 && r.Code < 500 && len(r.Enhanced) > 3 && r.Enhanced[:4] == "4.7."
}

// replied notes a reply of the site's: a response rule's action, a
// throttling signal. It reports whether a rule says the site blocks the
// relay: the recipients' verdict is then soft, whatever the code.
func (s *site) replied(r Reply) (blocked bool) {
	if r.ok() {
		return false
	}
	resp, ruled := s.rule.Respond(r.String())
	switch {
	case ruled && resp.Action == sites.Throttle, !ruled && throttling(r):
		s.throttle()
	case ruled:
		if resp.For > 0 {
			s.suspend(r, resp.For)
		}
		return resp.Action == sites.Block
	}
	return false
}

// accepted notes a message the site took in d.
func (s *site) accepted(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.e.rules.Adapt.Success(&s.share)
	s.setRates()
	if s.jobTime == 0 {
		s.jobTime = d
	} else {
		s.jobTime += (d - s.jobTime) / 8
	}
}

// throttle shrinks the site's share of its limits.
func (s *site) throttle() {
	s.mu.Lock()
	shrank := s.e.rules.Adapt.Throttle(&s.share, time.Now())
	if shrank {
		s.setRates()
	}
	share, sessions := s.share.Of(), s.share.Sessions(s.rule.Limits.Sessions)
	s.mu.Unlock()
	s.e.metrics.siteThrottled.WithLabelValues(s.label).Inc()
	if shrank {
		s.e.log.Info("delivery: site throttles: its sessions and rate are cut", "site", s.rule.Key, "share", share, "sessions", sessions)
	}
}

// setRates sets the limiters to the share, and, in a fleet, to this
// relay's part of the site's rates (fleetPart); s.mu is held.
func (s *site) setRates() {
	part := s.fleetPart()
	l := s.rule.Limits
	if s.msgs != nil {
		s.msgs.SetLimit(rate.Limit(part * s.share.Rate(l.MessagesPerMinute) / 60))
	}
	if s.hourly != nil {
		s.hourly.SetLimit(rate.Limit(part * l.MessagesPerHour / 3600))
	}
	if s.conns != nil {
		s.conns.SetLimit(rate.Limit(part * l.ConnectionsPerMinute / 60))
	}
}

// fleetPart is this relay's part of the site's rates when relays share
// the store: the part of the site's sessions at once it holds the slots
// of (one at least, the one it is opening). The relays' parts add up to
// one at most, and a relay with more of the site's mail opens more
// sessions, and so takes more of its rates. Alone, 1; s.mu is held.
func (s *site) fleetPart() float64 {
	f := s.e.fleet
	n := s.share.Sessions(s.rule.Limits.Sessions)
	if f == nil || n == 0 {
		return 1
	}
	return min(float64(max(f.holds(s.rule.Key), 1))/float64(n), 1)
}

// mayAskSlots says whether a session may ask the store for a slot now.
func (s *site) mayAskSlots(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !now.Before(s.noSlots)
}

// noSlotsFor notes that a take found no slot: the site's sessions wait d
// before they ask again.
func (s *site) noSlotsFor(d time.Duration) {
	s.mu.Lock()
	s.noSlots = time.Now().Add(d)
	s.mu.Unlock()
}

// rescale sets the rates again once the slots this relay holds changed.
func (s *site) rescale() {
	s.mu.Lock()
	s.setRates()
	s.mu.Unlock()
}

// suspend stops the site's mail for d after reply r.
func (s *site) suspend(r Reply, d time.Duration) {
	now := time.Now()
	s.mu.Lock()
	was := now.Before(s.suspended)
	if !was {
		s.suspended, s.why = now.Add(d), r.String()
	}
	s.mu.Unlock()
	if was {
		return
	}
	s.e.metrics.sitesSuspended.WithLabelValues(s.label).Inc()
	time.AfterFunc(d, func() { s.e.metrics.sitesSuspended.WithLabelValues(s.label).Dec() })
	s.e.log.Warn("delivery: site suspended by a response rule: its mail waits, handed back", "site", s.rule.Key, "for", d, "reply", r.String())
}

// handedBack counts a job the site sent back to the outbox.
func (s *site) handedBack() { s.e.metrics.siteHandedBack.WithLabelValues(s.label).Inc() }

// told notes the replies of one transaction (site.replied), each once,
// and reports whether a response rule says the site blocks the relay.
func (s *site) told(out replies) (blocked bool) {
	seen := map[string]bool{}
	for _, r := range append(slices.Clone(out.rcpts), out.data) {
		if r.Code == 0 || seen[r.String()] {
			continue
		}
		seen[r.String()] = true
		s.heard(r.String())
		if s.replied(r) {
			blocked = true
		}
	}
	return blocked
}

// blocked makes the verdict of the job's recipients that failed soft: the
// site refused the relay, not their addresses.
func (j *job) blocked() {
	j.f.mu.Lock()
	defer j.f.mu.Unlock()
	for _, i := range j.rcpts {
		if r := &j.f.results[i]; r.Status != outcome.RecipientSent {
			r.Verdict = outcome.VerdictSoft
		}
	}
}
