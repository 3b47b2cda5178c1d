// Package outboxtest gives tests a spool and a bbolt outbox, and puts
// messages in them as intake would.
package outboxtest

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/spool"
)

// Open makes a spool and an outbox in a directory of the test's, closed
// when the test ends.
func Open(t testing.TB) (*spool.Spool, *bolt.Store) {
	t.Helper()
	sp, err := spool.Open(filepath.Join(t.TempDir(), "spool"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	return sp, Store(t)
}

// Store makes an outbox alone in a directory of the test's, closed when
// the test ends.
func Store(t testing.TB) *bolt.Store {
	t.Helper()
	store, err := bolt.Open(filepath.Join(t.TempDir(), "outbox.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// Creator is the part of an outbox that Add needs.
type Creator interface {
	Create(ctx context.Context, m *backends.Message) error
}

// Add spools body as the file of m and records m, ACCEPTED.
func Add(t testing.TB, sp *spool.Spool, store Creator, m *backends.Message, body []byte) {
	t.Helper()
	f, err := sp.Create(m.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.Write(body)
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	m.EmlPath = f.Path()
	m.Envelope.Size = f.Size()
	if err := store.Create(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// Counter is the part of an outbox that WaitCounts needs.
type Counter interface {
	Counts(ctx context.Context) (map[backends.Status]int, error)
}

// WaitCounts waits until done accepts the outbox's counts by status, and
// fails the test when that takes longer than timeout.
func WaitCounts(t testing.TB, store Counter, timeout time.Duration, done func(map[backends.Status]int) bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n, err := store.Counts(context.Background())
		if err == nil && done(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("outbox counts after %s: %v (error %v)", timeout, n, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ErrUnavailable is what a Hiccup answers while it fails.
var ErrUnavailable = errors.New("outbox unavailable (test)")

// Hiccup is a real outbox whose writes of delivery outcomes (moves from
// PROCESSING) fail with ErrUnavailable while Failures lasts, one failure
// each, as an outbox that hiccups does.
type Hiccup struct {
	*bolt.Store
	Failures atomic.Int32
}

func (h *Hiccup) Transition(ctx context.Context, t backends.Transition) error {
	if t.From == backends.StatusProcessing && h.Failures.Add(-1) >= 0 {
		return ErrUnavailable
	}
	return h.Store.Transition(ctx, t)
}

// WaitRenewed waits until message id's lease runs past past while it stays
// in status and held says it was not taken twice: a claim kept by renewals
// past the leases it would otherwise have run out after.
func WaitRenewed(t testing.TB, store interface {
	Get(context.Context, string) (*backends.Message, error)
}, id string, status backends.Status, past time.Time, held func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		m, err := store.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if m.Status != status || !held() {
			t.Fatalf("while %s is held: %s, or taken twice", id, m.Status)
		}
		if m.LeaseUntil.After(past) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease of %s is still %s, not renewed past %s", id, m.LeaseUntil, past)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Restorer is the part of an outbox that Restoring needs.
type Restorer interface {
	Restore(ctx context.Context, expiredBefore time.Time) (int, error)
}

// Restoring runs the relay's restore of expired leases, quicker, until the
// returned stop.
func Restoring(t testing.TB, store Restorer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if _, err := store.Restore(ctx, time.Now()); err != nil && ctx.Err() == nil {
				t.Errorf("restore: %v", err)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return func() { cancel(); <-done }
}

// Claims is a real outbox that tells, on Took, how many messages each
// claim from From took (every claim when From is empty).
type Claims struct {
	*bolt.Store
	From backends.Status
	Took chan int
}

// CountClaims counts the claims of store from from.
func CountClaims(store *bolt.Store, from backends.Status) *Claims {
	return &Claims{Store: store, From: from, Took: make(chan int, 100)}
}

func (s *Claims) Claim(ctx context.Context, c backends.Claim) ([]*backends.Message, error) {
	msgs, err := s.Store.Claim(ctx, c)
	if s.From == "" || c.From == s.From {
		s.Took <- len(msgs)
	}
	return msgs, err
}

// History is message id's statuses in the order it went through them,
// spaced.
func History(t testing.TB, store backends.Messages, id string) string {
	t.Helper()
	h, err := store.History(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	statuses := make([]string, len(h))
	for i, e := range h {
		statuses[i] = string(e.Status)
	}
	return strings.Join(statuses, " ")
}
