// Package journal keeps, on the relay's own disk, the outcomes the relay
// reached but the outbox did not take, and writes them to the outbox again
// until they land: a message accepted upstream must not be sent a second
// time because the outbox failed one write and the message's lease then
// ran out.
//
// The journal is a bbolt file of its own, one per relay. Its entries are
// outbox transitions that name the lease they were reached under
// (backends.Transition.Held), so that writing one late never overwrites a
// newer claim of the message: the outbox refuses it, and the journal drops
// it.
package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	bbolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/internal/groupcommit"
	"github.com/genropy/postino/internal/lease"
)

// Store is what the journal writes to.
type Store interface {
	Transition(ctx context.Context, t backends.Transition) error
}

// Options shape a journal.
type Options struct {
	// Retry spaces the rounds of writes while the store keeps failing them.
	Retry backoff.Schedule
	Log   *slog.Logger
}

var bucketOutcomes = []byte("outcomes") // message id -> JSON kept (earlier: the bare transition)

// Journal keeps outcomes until the store takes them. Its methods are safe
// for concurrent use.
type Journal struct {
	db      *bbolt.DB
	store   Store
	opts    Options
	commits *groupcommit.Committer[func(*bbolt.Tx) error]
	// kept is signalled when an outcome is kept, so that Run schedules a
	// round.
	kept chan struct{}
}

// Open opens or creates the journal file at path; Close closes it.
func Open(path string, store Store, o Options) (*Journal, error) {
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 2 * time.Second})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open outcome journal %s: the file is locked by another process; each relay needs a journal of its own (is another postino running under the same host name and data directory?)", path)
	}
	if err != nil {
		return nil, fmt.Errorf("open outcome journal %s: %w", path, err)
	}
	if err := db.Update(func(tx *bbolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketOutcomes)
		return err
	}); err != nil {
		db.Close()
		return nil, fmt.Errorf("open outcome journal %s: %w", path, err)
	}
	j := &Journal{db: db, store: store, opts: o, kept: make(chan struct{}, 1)}
	// Outcomes that fail together (the outbox is down) are kept together:
	// one fsync for all of them; one the file refuses loses no other.
	j.commits = groupcommit.New(groupcommit.Config{Max: 256}, groupcommit.BoltUpdates(db))
	return j, nil
}

// Close waits for the outcomes handed over to be kept, and closes the file.
func (j *Journal) Close() error {
	j.commits.Close()
	return j.db.Close()
}

// Refused reports whether the store refused a transition for good: the
// message moved on (another claim holds it, an earlier write landed), or
// is gone. Writing it again cannot succeed.
func Refused(err error) bool {
	return errors.Is(err, backends.ErrLockNotAcquired) || errors.Is(err, backends.ErrNotFound) ||
		errors.Is(err, backends.ErrInvalidTransition)
}

// Write writes t to the store, under the first of leases that the store
// takes (the leases the message may be under, from lease.Renewer.Release;
// none: t.Held). When the store fails it otherwise than by refusing it, t
// is kept in the journal with every one of leases, durably, and written
// again (by Run, and by Replay after a restart) until it lands or is
// refused; Write then returns nil, since t is no longer the caller's to
// lose. It returns the store's refusal, or the store's error when t could
// not even be kept.
func (j *Journal) Write(ctx context.Context, t backends.Transition, leases ...time.Time) error {
	k := kept{T: t, Leases: leases}
	err := j.land(ctx, k)
	if err == nil || Refused(err) {
		return err
	}
	if kerr := j.keep(k); kerr != nil {
		return fmt.Errorf("%w; and the outcome journal could not keep it to write it again: %v", err, kerr)
	}
	j.opts.Log.Warn("outbox: an outcome was not written; kept in the outcome journal and written again until it lands",
		"id", t.ID, "to", t.To, "error", err)
	select {
	case j.kept <- struct{}{}:
	default:
	}
	return nil
}

// kept is an outcome in the journal, with the leases its message may be
// under: a renewal whose answer was lost may have moved the lease, and
// the outcome must still land under the one the message holds.
type kept struct {
	T      backends.Transition `json:"transition"`
	Leases []time.Time         `json:"leases"`
}

// land writes k to the store under each of its leases in turn (none: the
// one its transition names), while the store refuses it for its lease.
func (j *Journal) land(ctx context.Context, k kept) error {
	leases := k.Leases
	if len(leases) == 0 {
		leases = []time.Time{k.T.Held}
	}
	return lease.Write(k.T, leases, func(t backends.Transition) error { return j.store.Transition(ctx, t) })
}

// decode reads an entry: a kept outcome or, as journals wrote before they
// kept the leases beside it, the bare transition.
func decode(raw []byte) (kept, error) {
	var k kept
	if err := json.Unmarshal(raw, &k); err != nil {
		return k, err
	}
	if k.T.ID == "" {
		if err := json.Unmarshal(raw, &k.T); err != nil {
			return k, err
		}
	}
	if k.T.ID == "" {
		return k, errors.New("the entry names no message")
	}
	return k, nil
}

// keep stores k under its message's id: a message has one outcome at a
// time, and a later one replaces an earlier that the store would refuse
// anyway (it names an older lease).
func (j *Journal) keep(k kept) error {
	b, err := json.Marshal(k)
	if err != nil {
		return err
	}
	return j.commits.Do(context.Background(), func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketOutcomes).Put([]byte(k.T.ID), b)
	})
}

// Len counts the outcomes kept.
func (j *Journal) Len() int {
	n := 0
	j.db.View(func(tx *bbolt.Tx) error {
		n = tx.Bucket(bucketOutcomes).Stats().KeyN
		return nil
	})
	return n
}

type entry struct {
	id  []byte
	raw []byte
}

// Replay writes every outcome kept to the store once, dropping those that
// land or are refused, and returns how many landed; its error says why
// some are still kept.
func (j *Journal) Replay(ctx context.Context) (int, error) {
	var entries []entry
	j.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketOutcomes).ForEach(func(k, v []byte) error {
			entries = append(entries, entry{bytes.Clone(k), bytes.Clone(v)})
			return nil
		})
	})
	landed := 0
	var failed error
	for _, e := range entries {
		k, err := decode(e.raw)
		if err != nil {
			j.opts.Log.Error("outcome journal: an entry cannot be read; dropped", "id", string(e.id), "error", err)
			j.drop(e)
			continue
		}
		t := k.T
		err = j.land(ctx, k)
		switch {
		case err == nil:
			landed++
			j.opts.Log.Info("outcome journal: a kept outcome was written", "id", t.ID, "to", t.To)
		case Refused(err):
			j.opts.Log.Warn("outcome journal: a kept outcome was refused, the message moved on; dropped",
				"id", t.ID, "to", t.To, "error", err)
		default:
			if failed == nil {
				failed = err
			}
			continue
		}
		if err := j.drop(e); err != nil && failed == nil {
			failed = err
		}
	}
	if failed != nil {
		return landed, fmt.Errorf("outcome journal: %d outcomes are kept to write again: %w", len(entries)-landed, failed)
	}
	return landed, nil
}

// drop removes e unless a newer outcome of the message replaced it
// meanwhile. A drop lost in a crash only means one more refusal at the
// next replay.
func (j *Journal) drop(e entry) error {
	return j.commits.Do(context.Background(), func(tx *bbolt.Tx) error {
		b := tx.Bucket(bucketOutcomes)
		if !bytes.Equal(b.Get(e.id), e.raw) {
			return nil
		}
		return b.Delete(e.id)
	})
}

// Run writes the outcomes kept until ctx ends: once at the start, then a
// round after each Write that keeps one, and again, further and further
// apart, while the store fails them.
func (j *Journal) Run(ctx context.Context) {
	failures := 0
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-j.kept:
			// The store just failed: give it the first delay.
			if failures == 0 {
				failures = 1
				timer.Reset(j.opts.Retry.Delay(failures))
			}
			continue
		case <-timer.C:
		}
		if _, err := j.Replay(ctx); err != nil {
			failures++
			delay := j.opts.Retry.Delay(failures)
			j.opts.Log.Warn("outcome journal: the outbox still fails; retrying", "error", err, "retry_in", delay)
			timer.Reset(delay)
			continue
		}
		failures = 0
	}
}
