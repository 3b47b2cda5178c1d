package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// errNoStatfs says that this system cannot tell free space.
var errNoStatfs = errors.New("free space unknown on this system")

// spaceCheckEvery spaces the looks at the spool's free space: a statfs is
// cheap, but on a shared spool (NFS) it is a round trip.
const spaceCheckEvery = time.Second

// spaceWatch says whether the spool's file system can take mail: it looks
// at the free space and inodes when asked (by /readyz and at each MAIL),
// at most once per spaceCheckEvery, and a write that failed for want of
// space makes it refuse until a later look finds room again. It thus comes
// back by itself once space is freed, although no write tells it so: the
// relay writes nothing while it refuses.
type spaceWatch struct {
	dir     string
	minFree uint64
	// log tells when the spool fills and when it takes mail again, once
	// each: not at each refused MAIL.
	log *slog.Logger

	mu        sync.Mutex
	checkedAt time.Time
	full      error
}

func newSpaceWatch(dir string, minFree uint64, log *slog.Logger) *spaceWatch {
	return &spaceWatch{dir: dir, minFree: minFree, log: log}
}

// Full says why the spool cannot take a message now, or nil.
func (w *spaceWatch) Full() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if now.Sub(w.checkedAt) < spaceCheckEvery {
		return w.full
	}
	w.checkedAt = now
	was := w.full
	free, inodes, err := statfs(w.dir)
	switch {
	case errors.Is(err, errNoStatfs):
		// Only failed writes tell on this system: the next look clears.
		w.full = nil
	case err != nil:
		w.full = fmt.Errorf("cannot tell the free space of the spool's file system: %w", err)
	case free < w.minFree:
		w.full = fmt.Errorf("the spool's file system has %s free, less than spool.min_free_space (%s): mail is refused with 452 4.3.1 until space is freed",
			mib(free), mib(w.minFree))
	case inodes == 0:
		w.full = errors.New("the spool's file system has no free inodes: mail is refused with 452 4.3.1 until files are removed")
	default:
		w.full = nil
	}
	w.changed(was)
	return w.full
}

// changed logs a change of state from was.
func (w *spaceWatch) changed(was error) {
	switch {
	case was == nil && w.full != nil:
		w.log.Error("the spool cannot take mail: MAIL is answered 452 4.3.1", "reason", w.full)
	case was != nil && w.full == nil:
		w.log.Info("the spool takes mail again")
	}
}

// NoSpace records a write that failed for want of space: the spool refuses
// mail until the next look finds room.
func (w *spaceWatch) NoSpace(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	w.checkedAt = now
	was := w.full
	defer w.changed(was)
	w.full = fmt.Errorf("a message could not be written at %s (%w): mail is refused with 452 4.3.1 until the spool's file system has spool.min_free_space (%s) free",
		now.UTC().Format(time.RFC3339), err, mib(w.minFree))
}

// mib writes a size in MiB, as an operator compares it with df -m.
func mib(n uint64) string { return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20)) }
