package delivery

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// queue holds the jobs waiting for one way out, and runs the sessions that
// carry them: a smarthost route's, or one site's of an MX route. An MX
// queue's jobs wait by domain: a session carries the jobs of the domain
// its connection was opened for first (a recipient domain has its own TLS
// policy), then takes the oldest domain's, reconnecting.
type queue struct {
	e     *Engine
	key   string
	route *Route
	// site is an MX queue's site; nil for a smarthost.
	site *site
	// A smarthost's limits: its max_connections and rate.
	max     int
	limiter *rate.Limiter

	mu      sync.Mutex
	pending map[string][]*job // by domain
	order   []string          // the domains with jobs waiting, oldest first
	queued  int
	active  int
	idle    []*session // sessions waiting for a job
	dests   map[string]*destination
}

// queueOf is the queue of route, of site s on an MX route.
func (e *Engine) queueOf(route *Route, s *site) *queue {
	key := route.Name
	if s != nil {
		key += "/" + s.rule.Key
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.queues[key]
	if q == nil {
		q = &queue{e: e, key: key, route: route, site: s, max: route.MaxConnections, pending: map[string][]*job{}, dests: map[string]*destination{}}
		if s == nil && route.Rate > 0 {
			q.limiter = rate.NewLimiter(rate.Limit(route.Rate), 1)
		}
		e.queues[key] = q
	}
	return q
}

// dest is the destination of the queue's jobs for domain.
func (q *queue) dest(domain string) *destination {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.dests[domain]
	if d == nil {
		key := q.route.Name
		if q.route.MX() {
			key += "/" + domain
		}
		d = &destination{e: q.e, q: q, key: key, route: q.route, domain: domain, health: q.e.health[q.route.Name]}
		q.dests[domain] = d
	}
	return d
}

// limit is how many sessions may run at once.
func (q *queue) limit() int {
	if q.site != nil {
		return q.site.sessions()
	}
	return q.max
}

// enqueue hands a job to an idle session, or queues it and starts a
// session if the limit allows. A site that is down, suspended or has as
// many jobs waiting as it may hold gets the job handed back instead.
func (q *queue) enqueue(j *job) {
	q.mu.Lock()
	if q.site != nil {
		if why, retryIn := q.site.admit(q.queued, time.Now()); why != "" {
			q.mu.Unlock()
			q.site.handedBack()
			j.wait(why, retryIn)
			return
		}
	}
	if s := q.takeIdle(j.domain); s != nil {
		q.mu.Unlock()
		s.next <- j
		return
	}
	q.pending[j.domain] = append(q.pending[j.domain], j)
	if len(q.pending[j.domain]) == 1 {
		q.order = append(q.order, j.domain)
	}
	q.queued++
	start := q.active < q.limit()
	if start {
		q.active++
		q.e.sessions.Add(1)
	}
	q.mu.Unlock()
	if start {
		go q.run()
	}
}

// takeIdle takes an idle session, one whose connection is to domain if
// there is one; q.mu is held.
func (q *queue) takeIdle(domain string) *session {
	if len(q.idle) == 0 {
		return nil
	}
	i := slices.IndexFunc(q.idle, func(s *session) bool { return s.d != nil && s.d.domain == domain })
	if i < 0 {
		i = len(q.idle) - 1
	}
	s := q.idle[i]
	q.idle = slices.Delete(q.idle, i, i+1)
	return s
}

// pop takes the next job: domain's first, else the oldest domain's; q.mu
// is held.
func (q *queue) pop(domain string) *job {
	if len(q.order) == 0 {
		return nil
	}
	if _, ok := q.pending[domain]; !ok {
		domain = q.order[0]
	}
	jobs := q.pending[domain]
	j := jobs[0]
	if len(jobs) == 1 {
		delete(q.pending, domain)
		q.order = slices.DeleteFunc(q.order, func(d string) bool { return d == domain })
	} else {
		q.pending[domain] = jobs[1:]
	}
	q.queued--
	return j
}

// drain takes every job waiting; q.mu is held.
func (q *queue) drain() []*job {
	var out []*job
	for _, d := range q.order {
		out = append(out, q.pending[d]...)
	}
	clear(q.pending)
	q.order, q.queued = nil, 0
	return out
}

// run is one upstream session: it takes jobs until none comes for the idle
// time, reusing its connection.
func (q *queue) run() {
	e := q.e
	defer e.sessions.Done()
	s := &session{q: q, next: make(chan *job, 1), slot: -1}
	stop := context.AfterFunc(e.abort, s.abort)
	defer stop()
	idle := time.NewTimer(e.cfg.IdleTimeout)
	defer idle.Stop()
	for {
		j := q.take(s, idle)
		if j == nil {
			s.quit()
			s.release()
			return
		}
		s.carry(j)
	}
}

// take waits for the session's next job for the idle time. It returns nil
// when the session should end: nothing came, the relay is stopping, the
// site allows fewer sessions now, or another domain of the site waits for
// a session while this one has nothing to do.
func (q *queue) take(s *session, idle *time.Timer) *job {
	e := q.e
	q.mu.Lock()
	if q.site != nil {
		if closed := q.site.closed(time.Now()); closed != "" {
			// Down or suspended: what waits goes back to the outbox.
			jobs := q.drain()
			q.mu.Unlock()
			for _, j := range jobs {
				q.site.handedBack()
				j.wait(closed, q.site.reopensIn(time.Now()))
			}
			q.mu.Lock()
		}
	}
	if q.active > q.limit() || e.abort.Err() != nil {
		q.active--
		q.mu.Unlock()
		return nil
	}
	if j := q.pop(s.domain()); j != nil {
		q.mu.Unlock()
		return j
	}
	q.idle = append(q.idle, s)
	q.mu.Unlock()
	idle.Reset(e.cfg.IdleTimeout)
	var j *job
	select {
	case j = <-s.next:
		return j
	case <-idle.C:
	case <-e.abort.Done():
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if i := slices.Index(q.idle, s); i >= 0 {
		q.idle = slices.Delete(q.idle, i, i+1)
		q.active--
		return nil
	}
	// A job was handed to it as it was leaving.
	return <-s.next
}

// interruptAll hands back, at the shutdown, the jobs no session took.
func (q *queue) interruptAll() {
	q.mu.Lock()
	jobs := q.drain()
	q.mu.Unlock()
	for _, j := range jobs {
		j.interrupt()
	}
}
