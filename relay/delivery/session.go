package delivery

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/genropy/postino/outcome"
)

// destination is where a job goes: a smarthost route, or one recipient
// domain of an MX route, whose TLS policy its connections follow. Its
// queue (the route's, or its site's) runs the sessions.
type destination struct {
	e      *Engine
	q      *queue
	key    string
	route  *Route
	domain string
	health *routeHealth
}

// session is what run keeps from job to job: its connection, which the
// shutdown closes from another goroutine.
type session struct {
	q *queue
	// d is the destination of the connection, or of the last one.
	d *destination
	c *client // written under mu, read by run's goroutine alone
	// used says the connection carried a message: the next needs RSET.
	used bool
	// carried counts the connection's messages.
	carried int
	// next takes a job handed to the session while it is idle.
	next chan *job
	// slot is the site's session slot the session holds in the fleet
	// (fleet.go), or -1.
	slot int

	mu     sync.Mutex
	closed bool // by the shutdown
}

// abort closes the connection at the shutdown deadline, and any that
// opens after it.
func (s *session) abort() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.c != nil {
		s.c.close()
	}
}

func (s *session) setClient(c *client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed && c != nil {
		c.close()
	}
	s.c = c
}

// domain is the recipient domain of the session's connection, or empty.
func (s *session) domain() string {
	if s.d == nil {
		return ""
	}
	return s.d.domain
}

// quit ends the session's connection, if it has one.
func (s *session) quit() {
	if s.c != nil {
		s.c.quit()
		s.setClient(nil)
		s.q.e.metrics.connections.Dec()
		if s.q.site != nil {
			s.q.e.metrics.siteSessions.WithLabelValues(s.q.site.label).Dec()
		}
	}
}

// carry delivers one job, connecting first when the session has no
// connection, unless the relay is stopping, the job's lease is too short,
// or its site's rates would keep it waiting long. A connection carries at
// most its site's messages_per_session, for the domains it may serve
// (mayReuse).
func (s *session) carry(j *job) {
	q, e := s.q, s.q.e
	d := q.dest(j.domain)
	if e.abort.Err() != nil {
		j.interrupt()
		return
	}
	if !d.inTime(j) {
		return
	}
	if !s.pace(j, false) {
		return
	}
	if s.c != nil && (s.d != d && !d.mayReuse(s.c) || q.site != nil && q.site.rule.Limits.MessagesPerSession > 0 && s.carried >= q.site.rule.Limits.MessagesPerSession ||
		!s.slotHeld()) {
		s.quit()
	}
	s.d = d
	if s.c == nil && (!s.pace(j, true) || !s.hold(j) || !s.connect(j)) {
		return
	}
	start := time.Now()
	accepted := d.deliver(s.c, j, s.used)
	s.used = true
	s.carried++
	if q.site != nil && accepted {
		q.site.accepted(time.Since(start))
	}
	if s.c.broken {
		s.c.close()
		e.metrics.connections.Dec()
		if q.site != nil {
			e.metrics.siteSessions.WithLabelValues(q.site.label).Dec()
		}
		s.setClient(nil)
		return
	}
	// A session still usable after a message says the upstream works,
	// though new connections may fail (it limits how many it takes).
	d.health.success()
}

// slotRetry is how long a session first waits to try again for a slot
// of its site when other relays hold them all; it doubles up to
// slotRetryMax.
const (
	slotRetry    = 100 * time.Millisecond
	slotRetryMax = 2 * time.Second
)

// fleetSite is the site whose sessions the fleet shares, or nil: a
// smarthost's queue, a relay alone on its store, a site of no session
// limit.
func (s *session) fleetSite() *site {
	if s.q.e.fleet == nil || s.q.site == nil || s.q.site.rule.Limits.Sessions == 0 {
		return nil
	}
	return s.q.site
}

// slotHeld reports whether the session may keep its connection: it
// holds its slot still (another relay took it over after the renewals
// failed for a lease).
func (s *session) slotHeld() bool {
	site := s.fleetSite()
	if site == nil || s.slot < 0 || s.q.e.fleet.mine(site.rule.Key, s.slot) {
		return true
	}
	s.release()
	return false
}

// hold takes one of the site's session slots in the fleet before the
// session's connection opens, waiting while other relays hold them all.
// A job that would wait over a quarter of its lease is handed back, as
// for a rate.
func (s *session) hold(j *job) bool {
	site := s.fleetSite()
	if site == nil || s.slot >= 0 {
		return true
	}
	e := s.q.e
	var waited time.Duration
	for wait := slotRetry; ; wait = min(2*wait, slotRetryMax) {
		// While another session of the site found none lately, this one
		// waits without asking the store.
		i, err := -1, error(nil)
		if site.mayAskSlots(time.Now()) {
			i, err = e.fleet.take(e.abort, site.rule.Key, s.q.limit())
			if i < 0 && err == nil {
				site.noSlotsFor(wait)
			}
		}
		switch {
		case e.abort.Err() != nil:
			j.interrupt()
			return false
		case err != nil:
			site.handedBack()
			j.wait(fmt.Sprintf("handed back: site %s's sessions are shared by the relays through the outbox, which failed: %s; the attempt does not count",
				site.rule.Key, oneLine(err.Error())), e.cfg.Poll)
			return false
		case i >= 0:
			s.slot = i
			e.metrics.siteSlots.WithLabelValues(site.label).Inc()
			site.rescale()
			return true
		case waited+wait > e.cfg.Lease/4:
			site.handedBack()
			j.wait(fmt.Sprintf("handed back: site %s's %d sessions at once are all open on other relays sharing the outbox; the attempt does not count",
				site.rule.Key, s.q.limit()), waited)
			return false
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-e.abort.Done():
		}
		t.Stop()
		waited += wait
	}
}

// release gives the session's slot back to the fleet.
func (s *session) release() {
	site := s.fleetSite()
	if site == nil || s.slot < 0 {
		return
	}
	e := s.q.e
	// At the shutdown too: what is released now need not run out.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(e.abort), e.cfg.Timeouts.Command)
	defer cancel()
	e.fleet.give(ctx, site.rule.Key, s.slot)
	s.slot = -1
	e.metrics.siteSlots.WithLabelValues(site.label).Dec()
	site.rescale()
}

// pace waits for the rate of the job's way out to allow a message, or a
// new connection (conn): a smarthost's rate, a site's messages and
// connections per minute. A job that would wait for a site more than a
// quarter of its lease is handed back, due when the rate allows it.
func (s *session) pace(j *job, conn bool) bool {
	q, e := s.q, s.q.e
	if q.site == nil {
		if conn || q.limiter == nil {
			return true
		}
		if err := q.limiter.Wait(e.abort); err != nil {
			j.interrupt()
			return false
		}
		return true
	}
	wait, err := q.site.pace(e.abort, conn, e.cfg.Lease/4)
	switch {
	case err != nil:
		j.interrupt()
		return false
	case wait > 0:
		what := "messages"
		if conn {
			what = "new connections"
		}
		q.site.handedBack()
		j.wait(fmt.Sprintf("handed back: site %s's rate of %s would keep it waiting %s; the attempt does not count",
			q.site.rule.Key, what, wait.Round(time.Millisecond)), wait)
		return false
	}
	return true
}

// inTime reports whether the job may still be sent within its lease; when
// not, it ends the job without sending.
func (d *destination) inTime(j *job) bool {
	e := d.e
	until, lost := e.leases.Until(j.f.hold)
	left := time.Until(until)
	// The lease is renewed while the message waits: less than half of it
	// left means the renewals fail, and sent now, the message could still
	// be on its way when the lease runs out and another claim sends it
	// again. Checked before the rate limit, so that handing back spends
	// none of it.
	if left >= e.cfg.Lease/2 && !lost {
		return true
	}
	if lost || left <= 0 {
		j.loseClaim()
		return false
	}
	// It waits about as long again before the next claim, so that the
	// destination's queue drains instead of taking it straight back.
	waited := time.Since(j.f.start)
	j.handBack(fmt.Sprintf("handed back: it waited %s for a session to %s and its lease could not be renewed meanwhile (%s left of %s); the attempt does not count",
		waited.Round(time.Millisecond), d.key, left.Round(time.Millisecond), e.cfg.Lease), waited)
	return false
}

// connect opens the session's connection for job j. When it cannot, it
// ends the job: handed back at the shutdown, its recipients failed with
// the verdict otherwise (temporary unless the destination refuses mail).
func (s *session) connect(j *job) bool {
	e, site := s.d.e, s.q.site
	c, host, rep, err := s.d.connect()
	switch {
	case e.abort.Err() != nil:
		if c != nil {
			c.close()
		}
		j.interrupt()
		return false
	case rep != nil:
		// A verdict on the domain: the upstream is neither up nor down.
		j.fail(host, *rep)
		j.done()
		return false
	case err != nil:
		where := s.d.domain
		if site != nil {
			// The route is down when its failures reach two sites.
			where = site.rule.Key
			site.connectFailed(err)
		}
		s.d.health.failure(where, err)
		j.fail(host, verdict(451, "4.4.1", "%s", oneLine(err.Error())))
		j.done()
		return false
	}
	s.d.health.success()
	s.setClient(c)
	e.metrics.connections.Inc()
	if site != nil {
		site.connected()
		e.metrics.siteSessions.WithLabelValues(site.label).Inc()
	}
	s.used, s.carried = false, 0
	return true
}

// deliver sends one job over an open session, and reports whether the
// upstream accepted the message.
func (d *destination) deliver(c *client, j *job, reset bool) bool {
	e := d.e
	m := j.f.m
	// An upstream without 8BITMIME gets the 8-bit parts re-encoded.
	sevenBit := m.Envelope.EightBit && !c.has("8BITMIME")
	fm := j.form(sevenBit)
	if fm.rep != nil {
		j.fail(c.host, *fm.rep)
		j.done()
		return false
	}
	body, err := j.f.open(fm)
	if err != nil {
		// A missing mount or a volume's hiccup looks the same as a file
		// gone for good: the message waits for its next attempt, and only
		// its maximum age, or an operator, ends it.
		j.fail(c.host, verdict(451, "4.3.0", "%s", err))
		j.done()
		return false
	}
	defer body.Close()
	rcpts := make([]string, len(j.rcpts))
	for k, i := range j.rcpts {
		rcpts[k] = m.Envelope.Recipients[i]
	}
	sig := ""
	if fm.signed != nil {
		sig = fm.signed.Fields
	}
	t := &transaction{
		from: d.route.envelopeSender(m), rcpts: rcpts, size: fm.size + int64(len(sig)),
		smtputf8: m.Envelope.SMTPUTF8, eightBit: m.Envelope.EightBit && !sevenBit,
		body: io.MultiReader(strings.NewReader(sig), bufio.NewReaderSize(body, 32<<10)), envID: m.ID, reset: reset,
	}
	out, err := c.send(t)
	if err != nil && e.abort.Err() != nil {
		j.interrupt()
		return false
	}
	j.record(c.host, c.security(), out, err)
	if d.q.site != nil && d.q.site.told(out) {
		j.blocked()
	}
	j.done()
	return err == nil && out.data.ok()
}

// connect opens a session ready for MAIL. It returns a permanent verdict for
// the destination as a Reply, a temporary failure as an error.
func (d *destination) connect() (*client, string, *Reply, error) {
	ctx, cancel := context.WithCancel(d.e.abort)
	defer cancel()
	if !d.route.MX() {
		host, _, _ := net.SplitHostPort(d.route.Smarthost)
		c, err := d.open(ctx, d.route.Smarthost, host, d.route.routePlan())
		return c, host, nil, err
	}
	hosts, secure, rep, err := d.e.dns.hosts(ctx, d.domain)
	if rep != nil || err != nil {
		return nil, d.domain, rep, err
	}
	var errs []string
	var causes []error
	for _, host := range hosts {
		plan, err := d.mxPlan(ctx, host, secure)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", host, err))
			continue
		}
		ips, err := d.e.dns.addresses(ctx, host)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", host, err))
			continue
		}
		for _, ip := range ips {
			addr := net.JoinHostPort(ip.IP.String(), strconv.Itoa(d.route.MXPort))
			c, err := d.open(ctx, addr, host, plan)
			if err == nil {
				return c, host, nil, nil
			}
			errs = append(errs, fmt.Sprintf("%s[%s]: %v", host, ip.IP, err))
			causes = append(causes, err)
		}
	}
	return nil, d.domain, nil, &hostsError{msg: fmt.Sprintf("no MX host of %s took the connection: %s", d.domain, strings.Join(errs, "; ")), causes: causes}
}

// mayReuse reports whether c, a session opened for another domain of the
// destination's site, may carry the destination's mail too, as one
// session to a provider carries mail for many of its domains: c's host is
// one of the domain's MX hosts, and the domain's TLS plan for it is c's,
// opportunistic or none. A plan that verifies the peer (verify, DANE,
// MTA-STS) or counts for a TLS report belongs to its domain: its session
// carries that domain's mail alone.
func (d *destination) mayReuse(c *client) bool {
	if !d.route.MX() || c.sec.Policy != TLSOpportunistic && c.sec.Policy != TLSNone {
		return false
	}
	// The MX answer that named the domain's site: no DNS question for a
	// switch of domain.
	hosts, secure, ok := d.e.knownHosts(d.domain)
	if !ok || !slices.Contains(hosts, c.host) {
		return false
	}
	ctx, cancel := context.WithCancel(d.e.abort)
	defer cancel()
	plan, err := d.mxPlan(ctx, c.host, secure)
	return err == nil && plan.policy == c.sec.Policy && plan.report == nil
}

// mxPlan is the TLS plan for host, an MX host of the destination's domain:
// the domain's policy (delivery.tls.policies, else the route's TLS mode),
// DANE where host publishes usable TLSA records that DNSSEC
// authenticated, whatever the policy but none, and else MTA-STS where the
// domain publishes a policy (TLSPolicies.stsPlan): DANE wins, as RFC 8461
// section 2 says. mxSecure says whether the MX answer that named host was
// authenticated. The error is a temporary failure for host: policy dane
// without such records, a TLSA question that failed on a signed zone, an
// MTA-STS policy that refuses host.
func (d *destination) mxPlan(ctx context.Context, host string, mxSecure bool) (*tlsPlan, error) {
	e := d.e
	pol := e.cfg.TLSPolicies
	policy := pol.of(d.domain, d.route.TLS)
	res, ok := e.dns.res.(dnssec)
	if policy == TLSNone || !ok || !res.Validating() || strings.HasPrefix(d.domain, "[") {
		if policy == PolicyDANE {
			return nil, fmt.Errorf("DANE: TLS policy dane of %s needs delivery.dns.servers that validate (delivery.dns.validating), and an MX host named by DNS", d.domain)
		}
		return pol.stsPlan(ctx, policy, d.domain, host)
	}
	recs, err := e.dane.lookup(ctx, res, host, d.route.MXPort, mxSecure)
	switch {
	case err != nil:
		pol.tlsaInvalid(d.domain, host)
		return nil, err
	case len(recs.usable) > 0:
		return &tlsPlan{policy: PolicyDANE, tlsa: recs.usable, alias: recs.alias, why: "DANE (its TLSA records)",
			report: pol.tlsaReport(d.domain, host, recs.usable)}, nil
	case policy == PolicyDANE:
		return nil, fmt.Errorf("DANE: TLS policy dane of %s (delivery.tls.policies) needs usable, DNSSEC-authenticated TLSA records of %s, and %s",
			d.domain, host, recs.none)
	}
	return pol.stsPlan(ctx, policy, d.domain, host)
}

// open connects to one address and goes through EHLO, TLS as plan says,
// and AUTH as the route wants.
func (d *destination) open(ctx context.Context, addr, host string, plan *tlsPlan) (*client, error) {
	r, e := d.route, d.e
	var implicit *tls.Config
	if plan.policy == TLSImplicit {
		implicit = r.tlsConfig
	}
	c, err := dial(ctx, addr, host, implicit, e.cfg.Timeouts)
	if err != nil {
		return nil, err
	}
	c.sec.Policy, c.sec.Verified = plan.policy, outcome.VerifiedNone
	if c.tls {
		c.sec.Verified = plan.verified
	}
	fail := func(err error) (*client, error) {
		c.close()
		return nil, err
	}
	if err := c.hello(e.cfg.HeloName); err != nil {
		return fail(err)
	}
	if c, err = d.secure(ctx, c, addr, host, plan); err != nil {
		return nil, err
	}
	if r.Username != "" {
		if err := c.auth(r.Username, r.Password); err != nil {
			return fail(fmt.Errorf("authentication to %s as %s failed (check the route's username and password): %w", addr, r.Username, err))
		}
	}
	return c, nil
}

// secure does what plan asks of TLS on a session that said EHLO:
// STARTTLS, required or when offered, the peer verified as the plan says.
// It returns the session to go on with: a new one, in clear, when an
// opportunistic handshake failed.
func (d *destination) secure(ctx context.Context, c *client, addr, host string, p *tlsPlan) (*client, error) {
	helo := d.e.cfg.HeloName
	switch {
	case p.policy == TLSNone || c.tls:
		return c, nil
	case !c.has("STARTTLS") && p.required():
		p.tally(c, errNoSTARTTLS)
		c.close()
		return nil, fmt.Errorf("%s does not offer STARTTLS, which %s requires", addr, p.why)
	case !c.has("STARTTLS"):
		p.tally(c, errNoSTARTTLS)
		return c, nil
	}
	cfg, by := p.config(host)
	err := c.startTLS(cfg, helo)
	p.tally(c, err)
	switch {
	case err == nil:
		c.sec.Verified = *by
		return c, nil
	case p.required():
		c.close()
		return nil, fmt.Errorf("STARTTLS with %s, which %s requires: %w", addr, p.why, err)
	}
	// Opportunistic: the handshake failed, so go on in clear.
	c.close()
	if c, err = dial(ctx, addr, host, nil, d.e.cfg.Timeouts); err != nil {
		return nil, err
	}
	c.sec = outcome.TLS{Policy: p.policy, Verified: outcome.VerifiedNone}
	if err := c.hello(helo); err != nil {
		c.close()
		return nil, err
	}
	delete(c.ext, "STARTTLS")
	return c, nil
}

// hostsError is the failure of every MX host of a domain; it unwraps to
// the connections' own errors, which say whether the site is unreachable
// or refused them (site.connectFailed).
type hostsError struct {
	msg    string
	causes []error
}

func (e *hostsError) Error() string   { return e.msg }
func (e *hostsError) Unwrap() []error { return e.causes }

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
