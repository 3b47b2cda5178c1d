package delivery

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/internal/claimloop"
	"github.com/genropy/postino/internal/lease"
	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay/delivery/sites"
	"github.com/genropy/postino/relay/dkim"
)

// Signer DKIM-signs a message as it leaves.
type Signer interface {
	// Sign reads the message and returns the fields to put before it;
	// domain, when set, is the signing domain instead of From's.
	Sign(r io.Reader, domain string) (dkim.Result, error)
	// Enabled tells whether signing is configured at all, and so whether
	// the history should say how each message was signed.
	Enabled() bool
}

// Store is what delivery needs of the outbox.
type Store interface {
	Claim(ctx context.Context, c backends.Claim) ([]*backends.Message, error)
	Transition(ctx context.Context, t backends.Transition) error
	Renew(ctx context.Context, r backends.Renewal) ([]string, error)
}

// Bodies opens a message's bytes by the path its row records: a spool file,
// or bytes the outbox keeps (spool.Bodies).
type Bodies interface {
	Open(path string) (io.ReadCloser, error)
}

// Outcomes writes the outcomes of attempts to the outbox until they land
// (journal.Journal): an outcome the store fails is kept and written again,
// so that a message accepted upstream is not sent again when its lease
// runs out. It writes t under the first of leases the store takes, and
// keeps every one of them with t (a renewal whose answer was lost may have
// moved the lease). It returns the store's refusal, or why it could not
// keep it.
type Outcomes interface {
	Write(ctx context.Context, t backends.Transition, leases ...time.Time) error
}

// Retry is the schedule of temporary failures; a message older than MaxAge
// fails with reason "expired".
type Retry struct {
	backoff.Schedule
	MaxAge time.Duration
}

// Config tunes the engine.
type Config struct {
	// MaxInFlight bounds the messages being delivered at once.
	MaxInFlight int
	// Lease is how long a message stays PROCESSING without a sign of
	// life: the engine renews the leases of the messages it holds every
	// third of it, so a slow delivery keeps its message while one whose
	// relay died goes to another within a lease. A message that has less
	// than half of it left when a session takes it (the renewals failed
	// while it waited for a busy or rate-limited destination) is handed
	// back instead of sent.
	Lease time.Duration
	// Poll is how often READY messages are looked for without a wake-up.
	Poll time.Duration
	// IdleTimeout is how long an upstream session waits for another message
	// before it quits.
	IdleTimeout time.Duration
	// ShutdownTimeout is how long deliveries in progress may go on once the
	// relay is told to stop.
	ShutdownTimeout time.Duration
	// MXConnections bounds the sessions to one site of MX delivery that
	// no rule of Sites bounds.
	MXConnections int
	// Sites are the shaping rules of MX delivery (sites.Load); nil is the
	// shipped rules alone.
	Sites *sites.Rules
	// SiteMetrics is how many sites of no known provider the metrics
	// name by their MX hosts, the first seen; the others are "other".
	SiteMetrics int
	Timeouts    Timeouts
	Retry       Retry
	// DownAfter is how many connection attempts in a row to a route's
	// upstream fail before the route is reported down (routeHealth).
	DownAfter int
	// ConfirmAfter is how long after DNS first said that a domain does
	// not exist the same answer confirms it (resolution).
	ConfirmAfter time.Duration
	// HeloName is the name said in EHLO.
	HeloName string
	// Owner names this relay in the history.
	Owner string
	// Acknowledge, when no plugin is configured, takes SENT and FAILED
	// through their callback status to acknowledged in the same commit.
	Acknowledge bool
	// Signer, when set, DKIM-signs every message before it leaves.
	Signer Signer
	// Outcomes, when set, writes the outcomes; without it they are written
	// to the store once, and one that fails waits for its lease to run out.
	Outcomes Outcomes
	// Holds, when set, holds back the recipients on the suppression list
	// before each attempt; Findings, when set, adds the hard verdicts of
	// the attempts to the list; Unsubscribes, when set, gives the
	// messages of bulk streams their unsubscribe fields.
	Holds        Holder
	Findings     Findings
	Unsubscribes Unsubscribes
	// Brake, when set, counts the outcomes of batches' messages, and
	// stops the batches it trips.
	Brake Brake
	// TLSPolicies, when set, are MX delivery's TLS policies by recipient
	// domain, and the authorities policy verify trusts.
	TLSPolicies *TLSPolicies
	// Leases, when set, are the store's lease rows: operators' site
	// suspensions are kept there (suspend.go), so that they hold on
	// every relay of the store and across restarts.
	Leases Leases
	// Fleet says that other relays may share the store: each site's
	// sessions at once, and so its rates, are shared through Leases
	// (fleet.go).
	Fleet bool
}

// Engine delivers READY messages.
type Engine struct {
	cfg     Config
	store   Store
	leases  *lease.Renewer
	spool   Bodies
	routes  *Routes
	log     *slog.Logger
	metrics *Metrics
	// health follows each route's upstream, by route name.
	health map[string]*routeHealth
	// dns asks the resolver of MX delivery, and follows it.
	dns *resolution
	// dane looks up the TLSA records of MX hosts.
	dane *dane
	// events is woken when messages reach SENT or FAILED.
	events Waker
	sig    *claimloop.Signals

	// rules are cfg.Sites, or the shipped ones.
	rules *sites.Rules
	// fleet shares the sites' sessions with the other relays of the
	// store; nil for a relay alone.
	fleet *fleet

	mu     sync.Mutex
	queues map[string]*queue // by route, or route/site
	sites  map[string]*site  // by site key
	// domains are the sites of recipient domains, while fresh;
	// resolving the jobs waiting for their domain's MX answer.
	domains   map[string]knownDomain
	resolving map[string][]*job
	labelled  int // the sites named by their MX hosts in the metrics
	inflight  int
	// drained says that the last claim, with room to spare, found all
	// that was due: until the next claim starts, a message made READY may
	// be claimed straight away (Reserve) without passing one in line.
	drained bool

	// abort ends the upstream sessions when the shutdown deadline passes.
	abort    context.Context
	stop     context.CancelFunc
	sessions sync.WaitGroup
	flights  sync.WaitGroup
}

// Waker is woken when there is work for it.
type Waker interface {
	Wake()
}

// NewEngine builds the engine; Run starts it. events, when not nil, is
// woken when an outcome adds an event for the plugins: the dispatcher.
func NewEngine(cfg Config, store Store, sp Bodies, routes *Routes, res Resolver, log *slog.Logger, m *Metrics, events Waker) *Engine {
	abort, stop := context.WithCancel(context.Background())
	rules := cfg.Sites
	if rules == nil {
		rules = sites.Shipped(cfg.MXConnections)
	}
	var fl *fleet
	if cfg.Fleet && cfg.Leases != nil {
		// The relay's name and its run's: a relay restarted does not take
		// for its own the slots its previous run left to run out.
		fl = newFleet(cfg.Leases, cfg.Owner+" "+rand.Text()[:8], cfg.Lease, log)
	}
	return &Engine{fleet: fl,
		cfg: cfg, store: store, leases: lease.New(store, backends.StatusProcessing, cfg.Lease, log), spool: sp, routes: routes, log: log, metrics: m, events: events,
		sig: claimloop.NewSignals(), rules: rules, queues: map[string]*queue{}, sites: map[string]*site{},
		domains: map[string]knownDomain{}, resolving: map[string][]*job{},
		abort: abort, stop: stop, health: newHealth(routes, cfg.DownAfter, log, m), dns: newResolution(res, cfg.ConfirmAfter, log, m),
		dane: &dane{log: log, noted: map[string]time.Time{}},
	}
}

// Resolution says why the resolvers of MX delivery fail, or is nil while
// they answer.
func (e *Engine) Resolution() error { return e.dns.err() }

// RouteHealth says, for every route, why it is down, or nil while its
// upstream takes connections.
func (e *Engine) RouteHealth() map[string]error {
	out := make(map[string]error, len(e.health))
	for name, h := range e.health {
		out[name] = h.err()
	}
	return out
}

// Wake tells the engine that messages may be ready.
func (e *Engine) Wake() { e.sig.Wake() }

// Run claims and delivers until ctx ends. Then it claims nothing more, lets
// the deliveries in progress finish for ShutdownTimeout, ends the others
// and hands their messages back to READY without counting an attempt. The
// leases of the messages it holds are renewed until then.
func (e *Engine) Run(ctx context.Context) {
	renewCtx, stopRenewing := context.WithCancel(context.Background())
	var renewer sync.WaitGroup
	renewer.Go(func() { e.leases.Run(renewCtx) })
	if e.fleet != nil {
		renewer.Go(func() { e.fleet.run(renewCtx) })
	}
	defer renewer.Wait()
	defer stopRenewing()
	claimloop.Run(ctx, e.sig, claimloop.Stage[struct{}]{
		Poll: e.cfg.Poll, Log: e.log, What: "delivery: claims of ready messages",
		Claim: func() (claimloop.Result, error) {
			n, room, err := e.claim(ctx)
			switch {
			// A flight that lands makes room, which matters only when
			// the engine had none: a claim with room to spare found all
			// that was due, and another now would find nothing.
			case room == 0:
				return claimloop.NoRoom, err
			case n == room:
				return claimloop.More, err
			}
			return claimloop.Drained, err
		},
	})
	// No more claims straight from intake: shutdown waits for the flights
	// there are.
	e.setDrained(false)
	e.shutdown()
}

func (e *Engine) setDrained(d bool) {
	e.mu.Lock()
	e.drained = d
	e.mu.Unlock()
}

// Reserve is for the intake worker: it adds to t, which makes a message
// READY and due now, the move that claims it for delivery, and holds its
// place, when the engine has room and its last claim found nothing else
// due (so that no message is passed in claim order; one that fell due
// since waits for the next claim, as it would have). The caller then
// delivers the message (Deliver) once t has landed, or gives the place
// back (Release). A claim is a round trip and a write of its own, and
// each relay sharing an outbox would make one for every batch its intake
// prepares. Reserve refuses once Run's claims have ended; a message it
// took must be delivered before Run returns (the relay stops its intake
// worker first).
func (e *Engine) Reserve(t *backends.Transition) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.drained || e.inflight >= e.cfg.MaxInFlight {
		return false
	}
	e.inflight++
	e.flights.Add(1)
	t.LeaseUntil = time.Now().UTC().Add(e.cfg.Lease)
	t.Then = append(t.Then, backends.Step{To: backends.StatusProcessing, Reason: e.claimReason()})
	return true
}

// Deliver delivers m, which the transition Reserve added to claimed. The
// intake worker read the suppression list for it a moment ago: it is not
// read again (a message that waited is, when a claim takes it).
func (e *Engine) Deliver(m *backends.Message) { e.dispatch(true, m) }

// Release gives back a place Reserve held for a transition that did not
// land.
func (e *Engine) Release() { e.landed() }

func (e *Engine) claimReason() string { return "claimed for delivery by " + e.cfg.Owner }

func (e *Engine) shutdown() {
	done := make(chan struct{})
	go func() { e.flights.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(e.cfg.ShutdownTimeout):
		e.log.Warn("delivery: shutdown deadline passed; handing back the messages still in progress")
	}
	e.stop()
	e.sessions.Wait()
	// Jobs no session took are handed back too.
	e.mu.Lock()
	queues := slices.Collect(maps.Values(e.queues))
	e.mu.Unlock()
	for _, q := range queues {
		q.interruptAll()
	}
	<-done
}

// claim claims as many READY messages as there is room for, at most 256,
// and dispatches them. It returns how many it claimed, and the room. The
// room is held while the claim runs, so that what Reserve takes meanwhile
// stays within MaxInFlight; Reserve goes on meanwhile as the last claim
// allowed, or every message the intake worker prepared while a claim ran
// would wait for the next.
func (e *Engine) claim(ctx context.Context) (n, room int, err error) {
	e.mu.Lock()
	room = max(min(e.cfg.MaxInFlight-e.inflight, 256), 0)
	e.inflight += room
	e.mu.Unlock()
	var msgs []*backends.Message
	if room > 0 {
		now := time.Now().UTC()
		msgs, err = e.store.Claim(context.WithoutCancel(ctx), backends.Claim{
			From: backends.StatusReady, To: backends.StatusProcessing,
			Now: now, LeaseUntil: now.Add(e.cfg.Lease), Limit: room, Reason: e.claimReason(),
		})
	}
	e.mu.Lock()
	e.inflight -= room - len(msgs)
	e.drained = err == nil && len(msgs) < room
	e.mu.Unlock()
	e.flights.Add(len(msgs))
	e.dispatch(false, msgs...)
	return len(msgs), room, err
}

// flight is one delivery attempt of a message: one job per destination.
type flight struct {
	e       *Engine
	m       *backends.Message
	route   *Route
	start   time.Time
	hold    *lease.Hold // the message's lease, renewed while the flight lasts
	mu      sync.Mutex
	results []outcome.Recipient
	tried   []int // the recipients of this attempt
	jobs    int   // jobs not finished
	// handedBack says why the attempt ends without counting, when a job
	// could not run: the shutdown, or a wait too long for the lease. It
	// counts all the same when another job of the flight ran.
	handedBack string
	// retryIn is how long a handed-back message waits before it may be
	// claimed again.
	retryIn time.Duration
	// forSite says the hand-back is its site's (down, suspended, busy):
	// past its maximum age the message expires rather than waits on.
	forSite bool
	ran     bool // a job has recorded replies
	// lost is set when the claim's lease ran out before a job could run:
	// the message may be another claim's by now, so nothing is recorded.
	lost bool

	// forms are the message as it leaves: as spooled, and re-encoded for
	// an upstream without 8BITMIME.
	forms [2]form
	// stream is the message's, where the suppression list was read.
	stream string
	// signed is the signature the history tells of (noteSigned).
	signed         *dkim.Result
	signedSevenBit bool
}

// job is the part of a flight for one destination.
type job struct {
	f      *flight
	rcpts  []int  // indexes into the message's recipients
	domain string // the destination's: "" for a smarthost
	// forms are the flight's, or, for a recipient with fields of its
	// own, the job's.
	forms *[2]form
}

// dispatch queues the messages' jobs; each message, as claimed, carries
// the claim's lease, and its place is counted in flight. With a
// suppression list, it reads the list first, off the claim loop, once for
// all the messages of a stream, unless they were held back just now.
func (e *Engine) dispatch(held bool, msgs ...*backends.Message) {
	flights := make([]*flight, 0, len(msgs))
	for _, m := range msgs {
		f := &flight{e: e, m: m, route: e.routes.get(m), start: time.Now(), results: m.RecipientResults(), hold: e.leases.Hold(m.ID, m.LeaseUntil)}
		if e.cfg.Brake != nil && e.cfg.Brake.Stopped(m.Batch) {
			// Claimed before the outbox suspended its batch: it waits with it.
			f.handedBack, f.retryIn = "handed back: its batch "+m.Batch+" was suspended by the brake", e.cfg.Poll
			go f.finish()
			continue
		}
		flights = append(flights, f)
	}
	switch {
	case e.cfg.Holds == nil:
		for _, f := range flights {
			e.launch(f, nil)
		}
	case held:
		for _, f := range flights {
			f.stream = e.cfg.Holds.StreamOf(f.m, "")
			e.launch(f, e.bulkFields(f))
		}
	default:
		go e.launchHeld(flights)
	}
}

// launch queues the flight's jobs: one per destination, or, for a message
// whose recipients each get their own fields (fields), one per recipient.
func (e *Engine) launch(f *flight, fields func(rcpt string) []byte) {
	byDest := map[string][]int{}
	var order []string
	for i, r := range f.results {
		if r.Status != outcome.RecipientPending {
			continue
		}
		key := ""
		if f.route.MX() {
			key = domainOf(r.Address)
		}
		if _, seen := byDest[key]; !seen {
			order = append(order, key)
		}
		byDest[key] = append(byDest[key], i)
		f.tried = append(f.tried, i)
	}
	var jobs []*job
	for _, domain := range order {
		if fields == nil {
			jobs = append(jobs, &job{f: f, rcpts: byDest[domain], domain: domain, forms: &f.forms})
			continue
		}
		for _, i := range byDest[domain] {
			forms := &[2]form{}
			forms[0].prefix = fields(f.results[i].Address)
			forms[1].prefix = forms[0].prefix
			jobs = append(jobs, &job{f: f, rcpts: []int{i}, domain: domain, forms: forms})
		}
	}
	f.jobs = len(jobs)
	if f.jobs == 0 {
		go f.finish() // nothing to send: only the record, off the claim loop
		return
	}
	for _, j := range jobs {
		e.route(f.route, j)
	}
}

// domainOf is the domain of addr, after its last '@': a quoted local part
// may hold one of its own ("a@b"@example.com).
func domainOf(addr string) string {
	at := strings.LastIndexByte(addr, '@')
	if at < 0 {
		return ""
	}
	return strings.ToLower(addr[at+1:])
}

// record stores the replies of one job's recipients, and how the session
// that carried them was secured (nil: none opened).
func (j *job) record(host string, sec *outcome.TLS, out replies, lost error) {
	f := j.f
	now := time.Now().UTC()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ran = true
	for k, i := range j.rcpts {
		rep := out.rcpts[k]
		if rep.ok() {
			// Taken at RCPT TO: what became of it is the content's reply.
			rep = out.data
			rep.ofMessage = true
		}
		r := &f.results[i]
		r.At, r.Host, r.TLS = now, host, sec
		switch {
		case rep.Code == 0:
			// The session was lost: the moment's failure.
			r.Status, r.Code, r.EnhancedCode, r.Verdict = outcome.RecipientPending, 0, "", outcome.VerdictSoft
			r.Text = "no reply: " + errText(lost)
		case rep.ok():
			r.Status, r.Verdict = outcome.RecipientSent, ""
		case rep.permanent():
			r.Status, r.Verdict = outcome.RecipientFailed, rep.addressVerdict()
		default:
			r.Status, r.Verdict = outcome.RecipientPending, rep.addressVerdict()
		}
		if rep.Code != 0 {
			r.Code, r.EnhancedCode, r.Text = rep.Code, rep.Enhanced, rep.Text
		}
	}
}

// fail gives every recipient of the job the same verdict, when no
// transaction could take place.
func (j *job) fail(host string, rep Reply) {
	out := replies{rcpts: make([]Reply, len(j.rcpts))}
	for i := range out.rcpts {
		out.rcpts[i] = rep
	}
	j.record(host, nil, out, nil)
}

// interrupt marks the job cut short by the shutdown: its recipients stay
// pending and the attempt does not count.
func (j *job) interrupt() {
	j.handBack("handed back at shutdown; the attempt does not count", 0)
}

// handBack ends the job without sending: its recipients stay pending, the
// message returns to READY and the attempt does not count.
func (j *job) handBack(why string, retryIn time.Duration) { j.back(why, retryIn, false) }

// wait hands the job back for its site, down, suspended or busy: the
// attempt does not count, but the message's maximum age holds.
func (j *job) wait(why string, retryIn time.Duration) { j.back(why, retryIn, true) }

func (j *job) back(why string, retryIn time.Duration, forSite bool) {
	j.f.mu.Lock()
	if j.f.handedBack == "" {
		j.f.handedBack, j.f.retryIn, j.f.forSite = why, retryIn, forSite
	}
	j.f.mu.Unlock()
	j.done()
}

// loseClaim ends a job whose lease has run out without sending: the
// message may already be another claim's.
func (j *job) loseClaim() {
	j.f.mu.Lock()
	j.f.lost = true
	j.f.mu.Unlock()
	j.done()
}

func (j *job) done() {
	f := j.f
	f.mu.Lock()
	f.jobs--
	last := f.jobs == 0
	f.mu.Unlock()
	if last {
		// The session goes on to its next message while the outcome is
		// committed: waiting for the outbox's fsync would idle it.
		go f.finish()
	}
}

func errText(err error) string {
	if err == nil {
		return "the session ended"
	}
	return err.Error()
}

// attempt is the history's account of one delivery attempt.
type attempt struct {
	Attempt    int                 `json:"attempt"`
	Route      string              `json:"route"`
	DurationMS int64               `json:"duration_ms"`
	DKIM       string              `json:"dkim,omitempty"`
	Recipients []outcome.Recipient `json:"recipients"`
}

// finish records the attempt and moves the message on: SENT when every
// recipient is resolved and one was accepted, FAILED when none was, READY
// for a later attempt otherwise.
func (f *flight) finish() {
	e := f.e
	defer e.landed()
	m := f.m
	attemptNo := m.Attempts + 1
	// The transition names the leases the message may be under, one a
	// renewal in flight may be writing included.
	leases := e.leases.Release(f.hold)
	if f.lost {
		// Recorded now, the attempt could overwrite a newer claim of the
		// message and lose that claim's outcome; left unrecorded, the
		// recipients this attempt reached may get the message twice.
		e.log.Warn("delivery: the lease ran out before every destination was tried; the attempt is not recorded and the next claim sends again what it does not know was sent",
			"id", m.ID, "lease_until", leases[0], "sent_to", addresses(f.results, outcome.RecipientSent))
		return
	}
	now := time.Now().UTC()
	d := decide(attemptEnd{
		results: f.results, now: now, created: m.CreatedAt, attempt: attemptNo, route: f.route.Name,
		handedBack: f.handedBack, retryIn: f.retryIn, forSite: f.forSite, ran: f.ran,
	}, e.cfg.Retry)
	f.results = d.results
	e.observe(d, f.route.Name, now.Sub(m.CreatedAt))
	t := f.transition(d, now, attemptNo)
	if err := e.record(t, leases); err != nil {
		// The lease returns the message to READY: delivered recipients may
		// then get it twice, never none.
		e.log.Error("delivery: cannot record the attempt", "id", m.ID, "to", t.To, "error", err)
		return
	}
	e.logOutcome(t, d, f.route.Name, attemptNo)
	e.recordFindings(f, now)
	e.countBatch(f)
	if len(t.Then) == 0 && t.To != backends.StatusReady && e.events != nil {
		e.events.Wake()
	}
}

// logOutcome says where an attempt left its message. A deferral is a
// warning, as a failure is: mail did not leave, and the line says why and
// when it is tried again.
func (e *Engine) logOutcome(t backends.Transition, d decision, route string, attemptNo int) {
	msg, level := strings.ToLower(string(t.To)), slog.LevelInfo
	args := []any{"id", t.ID, "route", route, "attempt", attemptNo, "reason", t.Reason}
	switch {
	case t.To == backends.StatusFailed:
		level = slog.LevelWarn
	case t.To == backends.StatusReady && d.addAttempt:
		msg, level = "deferred", slog.LevelWarn
		args = append(args, "next_attempt", d.dueAt)
	case t.To == backends.StatusReady:
		msg = "handed back"
	}
	e.log.Log(context.Background(), level, msg, args...)
}

// record writes the outbox's record of an attempt, holding the message's
// lease: the first of leases, or the next when the outbox refuses it (a
// renewal whose outcome was unknown may have landed).
func (e *Engine) record(t backends.Transition, leases []time.Time) error {
	if e.cfg.Outcomes != nil {
		return e.cfg.Outcomes.Write(context.Background(), t, leases...)
	}
	return lease.Write(t, leases, func(t backends.Transition) error { return e.store.Transition(context.Background(), t) })
}

// landed frees the place of a flight that has finished.
func (e *Engine) landed() {
	e.mu.Lock()
	e.inflight--
	e.mu.Unlock()
	e.sig.Freed()
	e.flights.Done()
}

// attemptEnd is what is known of an attempt when its last job is done.
type attemptEnd struct {
	results []outcome.Recipient
	now     time.Time
	created time.Time // when the message was accepted
	attempt int       // the number of this attempt, from 1
	route   string
	// handedBack says why a job could not run; the attempt counts all the
	// same when another job ran.
	handedBack string
	retryIn    time.Duration
	forSite    bool
	ran        bool
}

// decision is where an attempt leaves the message.
type decision struct {
	to         backends.Status
	reason     string
	dueAt      time.Time // zero: the due time does not change
	keepReason bool      // the reason goes to the history only
	addAttempt bool      // the attempt counts
	results    []outcome.Recipient
}

// decide moves the message on from an attempt: back to READY, without
// counting the attempt, when it was handed back before any job ran;
// otherwise SENT when every recipient is resolved and one was accepted,
// FAILED when none was and one was refused, SUPPRESSED when the
// suppression list held them all back, READY for a later attempt when some
// are pending.
// Recipients still pending past retry.MaxAge fail as expired.
func decide(a attemptEnd, retry Retry) decision {
	d := decision{results: slices.Clone(a.results)}
	// A message its site hands back still expires: a site down for days
	// must not keep it waiting past its maximum age.
	if a.handedBack != "" && !a.ran && (!a.forSite || a.now.Sub(a.created) < retry.MaxAge) {
		d.to, d.keepReason, d.dueAt, d.reason = backends.StatusReady, true, a.now.Add(a.retryIn), a.handedBack
		return d
	}
	d.addAttempt = true
	sent, failed, pending, suppressed := count(d.results)
	expired := pending > 0 && a.now.Sub(a.created) >= retry.MaxAge
	if expired {
		for i := range d.results {
			if r := &d.results[i]; r.Status == outcome.RecipientPending {
				// Temporary failures until time ran out say nothing of
				// the address.
				r.Status, r.Verdict = outcome.RecipientFailed, outcome.VerdictSoft
				r.Text = fmt.Sprintf("expired: not delivered within %s; last: %s", retry.MaxAge, r.Text)
			}
		}
		failed, pending = failed+pending, 0
	}
	switch {
	case pending > 0:
		d.to = backends.StatusReady
		d.dueAt = a.now.Add(retry.Delay(a.attempt))
		d.reason = fmt.Sprintf("deferred: %s; next attempt at %s", firstText(d.results, outcome.RecipientPending), d.dueAt.Format(time.RFC3339))
	case sent > 0:
		d.to = backends.StatusSent
		d.reason = fmt.Sprintf("delivered to %d of %d recipients via %s", sent, sent+failed+suppressed, a.route)
	case failed > 0:
		d.to = backends.StatusFailed
		d.reason = "no recipient accepted: " + firstText(d.results, outcome.RecipientFailed)
	default:
		d.to = backends.StatusSuppressed
		d.reason = "not sent: every recipient is suppressed; " + firstText(d.results, outcome.RecipientSuppressed)
	}
	if expired {
		d.reason = "expired: " + d.reason
	}
	return d
}

// observe counts a counted attempt in the metrics; age is the message's.
func (e *Engine) observe(d decision, route string, age time.Duration) {
	if !d.addAttempt {
		return
	}
	switch d.to {
	case backends.StatusReady:
		e.metrics.deferred.WithLabelValues(route).Inc()
	case backends.StatusSent:
		e.metrics.delivered.WithLabelValues(route).Inc()
		e.metrics.latency.Observe(age.Seconds())
	case backends.StatusFailed:
		e.metrics.failed.WithLabelValues(route).Inc()
	}
}

// transition is the outbox's record of the decision: the move, the
// history's account of the attempt and, for SENT and FAILED, the outcome
// event.
func (f *flight) transition(d decision, now time.Time, attemptNo int) backends.Transition {
	t := backends.Transition{ID: f.m.ID, From: backends.StatusProcessing, To: d.to, At: now, Results: d.results,
		Reason: d.reason, KeepReason: d.keepReason, DueAt: d.dueAt, AddAttempt: d.addAttempt}
	if f.e.cfg.Acknowledge {
		t.Then = acknowledged(t.To)
	}
	tried := make([]outcome.Recipient, len(f.tried))
	for k, i := range f.tried {
		tried[k] = d.results[i]
	}
	a := attempt{Attempt: attemptNo, Route: f.route.Name, DurationMS: time.Since(f.start).Milliseconds(), Recipients: tried}
	if signed := f.signature(); signed != nil {
		a.DKIM = signed.String()
		if d.addAttempt {
			t.Reason += "; " + a.DKIM
		}
	}
	t.Details, _ = json.Marshal(a)
	if t.To == backends.StatusSent || t.To == backends.StatusFailed || t.To == backends.StatusSuppressed {
		details := map[string]any{"attempts": attemptNo, "route": f.route.Name, "recipients": d.results}
		if t.To == backends.StatusSuppressed {
			// As intake's: plugins are told which stream's list held them.
			details["stream"] = f.stream
		}
		t.Event = backends.OutcomeEvent(backends.StatusProcessing, t.To, t.Reason, details)
		t.Event.At = now
		if len(t.Then) > 0 {
			t.Event.State = backends.EventAcked
		}
	}
	if t.To == backends.StatusSent && f.route.ReceiptsWithin > 0 {
		// Certified mail: its receipts are watched from now on.
		t.Alarm = &backends.Alarm{Kind: backends.AlarmPECReceipts, At: now.Add(f.route.ReceiptsWithin)}
	}
	return t
}

// acknowledged takes an outcome, when no plugin is configured, through
// its callback status to acknowledged.
func acknowledged(to backends.Status) []backends.Step {
	switch to {
	case backends.StatusSent:
		return noPlugin(backends.StatusCallingSent, backends.StatusSentAcknowledged)
	case backends.StatusFailed:
		return noPlugin(backends.StatusCallingFailed, backends.StatusFailedAcknowledged)
	case backends.StatusSuppressed:
		return noPlugin(backends.StatusCallingSuppressed, backends.StatusSuppressedAcknowledged)
	}
	return nil
}

func noPlugin(calling, acked backends.Status) []backends.Step {
	const why = "no plugin is configured"
	return []backends.Step{{To: calling, Reason: why}, {To: acked, Reason: why}}
}

func count(results []outcome.Recipient) (sent, failed, pending, suppressed int) {
	for _, r := range results {
		switch r.Status {
		case outcome.RecipientSent:
			sent++
		case outcome.RecipientFailed:
			failed++
		case outcome.RecipientSuppressed:
			suppressed++
		default:
			pending++
		}
	}
	return
}

// addresses lists the recipients in a state.
func addresses(results []outcome.Recipient, status string) []string {
	var out []string
	for _, r := range results {
		if r.Status == status {
			out = append(out, r.Address)
		}
	}
	return out
}

// firstText explains the first recipient in a state.
func firstText(results []outcome.Recipient, status string) string {
	for _, r := range results {
		if r.Status == status {
			s := r.Address + ": "
			if r.Code != 0 {
				s += Reply{Code: r.Code, Enhanced: r.EnhancedCode, Text: r.Text}.String()
			} else {
				s += r.Text
			}
			if r.Host != "" {
				s += " (" + r.Host + ")"
			}
			return s
		}
	}
	return ""
}
