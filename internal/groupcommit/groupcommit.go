// Package groupcommit gathers the writes of concurrent callers into groups
// that commit together: one fsync, one transaction, one log flush for many
// callers. While a group commits, the next one gathers, so groups grow with
// the load and with the commit's own latency.
//
// The outbox stores and the spool each commit through one Committer.
package groupcommit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// ErrClosed is returned for a request submitted after Close.
var ErrClosed = errors.New("the committer is closed")

// Config shapes the groups.
type Config struct {
	// Max bounds a group, so that one commit stays small; zero means no
	// bound.
	Max int
	// Window is how long a group waits for more requests after its first
	// one while the relay is under load, that is when the previous group
	// held more than one request: a group of callers released by the same
	// event (the fsyncs of their files) arrives within a moment, and fewer,
	// larger commits cost less. When idle, or with a zero Window, a group
	// takes only the requests already waiting, so a lone caller never
	// waits.
	Window time.Duration
	// Paced makes the window as long as the previous group's commit took,
	// and Window its most: each caller then waits at most one more commit,
	// and the groups grow with what a commit costs, which is most where a
	// loaded database server commits slowly.
	Paced bool
}

// Committer runs requests in groups, one group at a time.
type Committer[T any] struct {
	cfg    Config
	commit func(group []T) []error
	reqs   chan request[T]

	mu     sync.Mutex // guards closed against a send on a closed channel
	closed bool
	done   chan struct{}
}

// New starts a committer. commit runs one group and returns the error of
// each request, in order (nil for all of them when the group committed).
func New[T any](cfg Config, commit func(group []T) []error) *Committer[T] {
	c := &Committer[T]{cfg: cfg, commit: commit, reqs: make(chan request[T], queueSize), done: make(chan struct{})}
	go c.loop()
	return c
}

type request[T any] struct {
	p *Pending
	v T
}

// queueSize bounds the requests waiting for a group; beyond it Submit
// blocks, which slows the callers down to what the commits can take.
const queueSize = 1024

// Pending is a request handed to the committer, whose commit may not have
// happened yet.
type Pending struct {
	state atomic.Int32
	err   chan error
}

const (
	queued int32 = iota
	taken
	cancelled
)

// Submit hands v to the committer without waiting for its commit: the
// spool asks for its directory fsync when a file is created and waits for
// it when the message is complete. It waits only while the queue is full,
// and not past ctx: a request whose context has ended is never handed over.
func (c *Committer[T]) Submit(ctx context.Context, v T) *Pending {
	p := &Pending{err: make(chan error, 1)}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		p.withdraw(ErrClosed)
	case ctx.Err() != nil:
		p.withdraw(ctx.Err())
	default:
		select {
		case c.reqs <- request[T]{p, v}:
		case <-ctx.Done():
			p.withdraw(ctx.Err())
		}
	}
	return p
}

// withdraw ends a request that no group will take.
func (p *Pending) withdraw(err error) {
	p.state.Store(cancelled)
	p.err <- err
}

// Do submits v and waits for its commit.
func (c *Committer[T]) Do(ctx context.Context, v T) error {
	return c.Submit(ctx, v).Wait(ctx)
}

// Wait returns the outcome of the request's commit. When ctx ends before a
// group took the request, the request is withdrawn and Wait returns ctx's
// error; once taken, the request is committed or failed as a whole with its
// group, and Wait waits for that: the caller must know whether its write is
// durable.
func (p *Pending) Wait(ctx context.Context) error {
	select {
	case err := <-p.err:
		return err
	case <-ctx.Done():
		if p.state.CompareAndSwap(queued, cancelled) {
			return ctx.Err()
		}
		return <-p.err
	}
}

// Close commits the requests handed over already, then stops; a request
// submitted afterwards fails with ErrClosed.
func (c *Committer[T]) Close() {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.reqs)
	}
	c.mu.Unlock()
	<-c.done
}

func (c *Committer[T]) loop() {
	defer close(c.done)
	var (
		reqs  []*Pending
		vals  []T
		last  int           // requests in the previous group
		took  time.Duration // the previous group's commit
		timer = time.NewTimer(0)
	)
	<-timer.C
	for {
		r, ok := <-c.reqs
		if !ok {
			return
		}
		reqs, vals = c.take(reqs[:0], vals[:0], r)
		if w := c.cfg.window(last, took); w > 0 {
			timer.Reset(w)
			reqs, vals = c.gather(reqs, vals, timer.C)
			timer.Stop() // since Go 1.23 no stale tick is left behind
		}
		reqs, vals = c.drain(reqs, vals)
		last = len(reqs)
		if len(reqs) > 0 {
			start := time.Now()
			c.run(reqs, vals)
			took = time.Since(start)
		}
		clear(vals) // hold on to no value of a committed group
	}
}

// window is how long a group waits for more after its first request, when
// the previous group held last requests and its commit took that long.
func (cfg Config) window(last int, took time.Duration) time.Duration {
	switch {
	case last <= 1: // not under load: a lone caller never waits
		return 0
	case cfg.Paced:
		return min(took, cfg.Window)
	}
	return cfg.Window
}

// take adds r to the group unless its caller withdrew it.
func (c *Committer[T]) take(reqs []*Pending, vals []T, r request[T]) ([]*Pending, []T) {
	if !r.p.state.CompareAndSwap(queued, taken) {
		return reqs, vals
	}
	return append(reqs, r.p), append(vals, r.v)
}

func (c *Committer[T]) full(n int) bool { return c.cfg.Max > 0 && n >= c.cfg.Max }

// gather waits for more requests until the window ends or the group is full.
func (c *Committer[T]) gather(reqs []*Pending, vals []T, window <-chan time.Time) ([]*Pending, []T) {
	for !c.full(len(reqs)) {
		select {
		case r, ok := <-c.reqs:
			if !ok {
				return reqs, vals
			}
			reqs, vals = c.take(reqs, vals, r)
		case <-window:
			return reqs, vals
		}
	}
	return reqs, vals
}

// drain adds the requests already waiting, up to a full group.
func (c *Committer[T]) drain(reqs []*Pending, vals []T) ([]*Pending, []T) {
	for !c.full(len(reqs)) {
		select {
		case r, ok := <-c.reqs:
			if !ok {
				return reqs, vals
			}
			reqs, vals = c.take(reqs, vals, r)
		default:
			return reqs, vals
		}
	}
	return reqs, vals
}

func (c *Committer[T]) run(reqs []*Pending, vals []T) {
	errs := c.commit(vals)
	for i, p := range reqs {
		var err error
		if errs != nil {
			err = errs[i]
		}
		p.err <- err
	}
}
