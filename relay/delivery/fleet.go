package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/genropy/postino/backends"
)

// Leases are the store's lease rows (backends.Cursors) through which
// relays sharing an outbox share each site: its session slots, and its
// suspension by an operator.
type Leases interface {
	ClaimCursor(ctx context.Context, name, owner string, until time.Time) (backends.Cursor, error)
	ReadCursor(ctx context.Context, name string) (backends.Cursor, error)
}

// fleet holds, for the relays sharing a store, the session slots of
// sites: a session to a site opens only once it holds one of the site's
// slots ("slot:<site>#<i>", i below the site's sessions at once), a lease
// row of the store. The slot is the session's, not a message's, so the
// store work grows with the sessions opened, not with the mail: one claim
// or more when a session opens, one renewal per held slot every third of
// the lease, one release when it ends. A relay that dies stops renewing:
// its slots are free again once their lease runs out.
type fleet struct {
	store Leases
	owner string
	lease time.Duration
	log   *slog.Logger

	mu   sync.Mutex
	held map[string]map[int]bool // by site key, the slots held
	next map[string]int          // by site key, where the next take starts
}

func newFleet(store Leases, owner string, lease time.Duration, log *slog.Logger) *fleet {
	return &fleet{store: store, owner: owner, lease: lease, log: log, held: map[string]map[int]bool{}, next: map[string]int{}}
}

// leaseName is a lease row's name for a site: the site's key, or, for a
// key too long for a row's name (many MX hosts), its hash.
func leaseName(kind, key string) string {
	if len(key) > 200 {
		sum := sha256.Sum256([]byte(key))
		key = "sha256:" + hex.EncodeToString(sum[:])
	}
	return kind + ":" + key
}

func slotName(key string, i int) string { return fmt.Sprintf("%s#%d", leaseName("slot", key), i) }

// slotProbes bounds the slots one take asks the store for: a site of
// many sessions, all held, costs a few claims per try, not one per slot.
const slotProbes = 8

// take claims one of the site's first n slots, asking for at most
// slotProbes of them, from where its last take for the site stopped (at
// first, a place of the owner's hash, so that relays do not all try the
// same first). It returns the slot, or -1 when those it asked for are
// held by other relays.
func (f *fleet) take(ctx context.Context, key string, n int) (int, error) {
	if n <= 0 {
		return -1, nil
	}
	f.mu.Lock()
	start, ok := f.next[key]
	if !ok {
		h := fnv.New32a()
		h.Write([]byte(f.owner))
		start = int(h.Sum32() % uint32(n))
	}
	f.mu.Unlock()
	until := time.Now().Add(f.lease)
	asked := 0
	for k := 0; k < n && asked < slotProbes; k++ {
		i := (start + k) % n
		f.mu.Lock()
		f.next[key] = i + 1
		// Marked held before it is claimed: two sessions of this relay
		// must not both claim it (a claim by its owner succeeds).
		mine := f.held[key][i]
		if !mine {
			if f.held[key] == nil {
				f.held[key] = map[int]bool{}
			}
			f.held[key][i] = true
		}
		f.mu.Unlock()
		if mine {
			continue
		}
		asked++
		_, err := f.store.ClaimCursor(ctx, slotName(key, i), f.owner, until)
		if err == nil {
			return i, nil
		}
		f.mu.Lock()
		delete(f.held[key], i)
		f.mu.Unlock()
		if !errors.Is(err, backends.ErrLockNotAcquired) {
			return -1, fmt.Errorf("session slot %s: %w", slotName(key, i), err)
		}
	}
	return -1, nil
}

// give releases slot i of the site: its lease ends now.
func (f *fleet) give(ctx context.Context, key string, i int) {
	f.mu.Lock()
	delete(f.held[key], i)
	f.mu.Unlock()
	if _, err := f.store.ClaimCursor(ctx, slotName(key, i), f.owner, time.Now()); err != nil && !errors.Is(err, backends.ErrLockNotAcquired) {
		f.log.Warn("delivery: a session slot could not be released; it is free again when its lease runs out",
			"slot", slotName(key, i), "lease", f.lease, "error", err)
	}
}

// holds is how many of the site's slots this relay holds.
func (f *fleet) holds(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.held[key])
}

// run renews the slots held every third of the lease until ctx ends. A
// slot whose renewal is refused was taken by another relay after its
// lease ran out (the renewals failed for a lease): it is dropped, and its
// session ends at its next message.
func (f *fleet) run(ctx context.Context) {
	t := time.NewTicker(f.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.renew(ctx)
	}
}

func (f *fleet) renew(ctx context.Context) {
	type slot struct {
		key string
		i   int
	}
	var slots []slot
	f.mu.Lock()
	for key, held := range f.held {
		for i := range held {
			slots = append(slots, slot{key, i})
		}
	}
	f.mu.Unlock()
	until := time.Now().Add(f.lease)
	for _, s := range slots {
		_, err := f.store.ClaimCursor(ctx, slotName(s.key, s.i), f.owner, until)
		switch {
		case errors.Is(err, backends.ErrLockNotAcquired):
			f.mu.Lock()
			delete(f.held[s.key], s.i)
			f.mu.Unlock()
			f.log.Warn("delivery: a session slot was taken by another relay after its lease ran out; the session ends", "slot", slotName(s.key, s.i))
		case err != nil && ctx.Err() == nil:
			f.log.Warn("delivery: a session slot's lease could not be renewed; tried again in a third of the lease",
				"slot", slotName(s.key, s.i), "error", err)
		}
	}
}

// mine reports whether this relay still holds slot i of the site.
func (f *fleet) mine(key string, i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held[key][i]
}
