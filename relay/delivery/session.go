package delivery

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/genropy/postino/outcome"
)

// destination is where a group of jobs goes: a smarthost route, or one
// domain of an MX route. It runs up to max sessions, each carrying job
// after job.
type destination struct {
	e       *Engine
	key     string
	route   *Route
	domain  string
	jobs    chan *job
	limiter *rate.Limiter
	health  *routeHealth

	mu     sync.Mutex
	active int
	idle   int
	max    int
}

func (e *Engine) destination(route *Route, domain string) *destination {
	key := route.Name
	if route.MX() {
		key += "/" + domain
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	d := e.dests[key]
	if d == nil {
		d = &destination{e: e, key: key, route: route, domain: domain,
			jobs: make(chan *job, e.cfg.MaxInFlight), max: route.MaxConnections, health: e.health[route.Name]}
		if route.MX() {
			d.max = e.cfg.MXConnections
		}
		if route.Rate > 0 {
			d.limiter = rate.NewLimiter(rate.Limit(route.Rate), 1)
		}
		e.dests[key] = d
	}
	return d
}

// enqueue hands a job to an idle session, or starts one if the limit allows.
func (d *destination) enqueue(j *job) {
	d.jobs <- j
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.idle == 0 && d.active < d.max {
		d.active++
		d.e.sessions.Add(1)
		go d.run()
	}
}

// run is one upstream session: it takes jobs until none comes for the idle
// time, reusing its connection.
func (d *destination) run() {
	e := d.e
	defer e.sessions.Done()
	s := &session{d: d}
	stop := context.AfterFunc(e.abort, s.abort)
	defer stop()
	idle := time.NewTimer(e.cfg.IdleTimeout)
	defer idle.Stop()
	for {
		j, more := d.next(idle)
		if !more {
			s.quit()
			return
		}
		if j != nil {
			s.carry(j)
		}
	}
}

// next waits for a job for the idle time. It returns more false when the
// session should end: nothing came and nothing is queued, or the relay is
// stopping. A nil job with more true means wait again: a job came in as
// the session was leaving.
func (d *destination) next(idle *time.Timer) (j *job, more bool) {
	e := d.e
	d.mu.Lock()
	d.idle++
	d.mu.Unlock()
	idle.Reset(e.cfg.IdleTimeout)
	select {
	case j = <-d.jobs:
	case <-idle.C:
	case <-e.abort.Done():
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.idle--
	if j == nil && (len(d.jobs) == 0 || e.abort.Err() != nil) {
		d.active--
		return nil, false
	}
	return j, true
}

// session is what run keeps from job to job: its connection, which the
// shutdown closes from another goroutine.
type session struct {
	d *destination
	c *client // written under mu, read by run's goroutine alone
	// used says the connection carried a message: the next needs RSET.
	used bool

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

// quit ends the session's connection, if it has one.
func (s *session) quit() {
	if s.c != nil {
		s.c.quit()
		s.d.e.metrics.connections.Dec()
	}
}

// carry delivers one job, connecting first when the session has no
// connection, unless the relay is stopping or the job's lease is too short.
func (s *session) carry(j *job) {
	d, e := s.d, s.d.e
	if e.abort.Err() != nil {
		j.interrupt()
		return
	}
	if !d.inTime(j) {
		return
	}
	if d.limiter != nil {
		if err := d.limiter.Wait(e.abort); err != nil {
			j.interrupt()
			return
		}
	}
	if s.c == nil && !s.connect(j) {
		return
	}
	d.deliver(s.c, j, s.used)
	s.used = true
	if s.c.broken {
		s.c.close()
		e.metrics.connections.Dec()
		s.setClient(nil)
		return
	}
	// A session still usable after a message says the upstream works,
	// though new connections may fail (it limits how many it takes).
	d.health.success()
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
	e := s.d.e
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
		s.d.health.failure(s.d.domain, err)
		j.fail(host, verdict(451, "4.4.1", "%s", oneLine(err.Error())))
		j.done()
		return false
	}
	s.d.health.success()
	s.setClient(c)
	e.metrics.connections.Inc()
	s.used = false
	return true
}

// deliver sends one job over an open session.
func (d *destination) deliver(c *client, j *job, reset bool) {
	e := d.e
	m := j.f.m
	// An upstream without 8BITMIME gets the 8-bit parts re-encoded.
	sevenBit := m.Envelope.EightBit && !c.has("8BITMIME")
	fm := j.form(sevenBit)
	if fm.rep != nil {
		j.fail(c.host, *fm.rep)
		j.done()
		return
	}
	body, err := j.f.open(fm)
	if err != nil {
		// A missing mount or a volume's hiccup looks the same as a file
		// gone for good: the message waits for its next attempt, and only
		// its maximum age, or an operator, ends it.
		j.fail(c.host, verdict(451, "4.3.0", "%s", err))
		j.done()
		return
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
		return
	}
	j.record(c.host, c.security(), out, err)
	j.done()
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
		}
	}
	return nil, d.domain, nil, fmt.Errorf("no MX host of %s took the connection: %s", d.domain, strings.Join(errs, "; "))
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
		return &tlsPlan{policy: PolicyDANE, tlsa: recs.usable, why: "DANE (its TLSA records)",
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

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
