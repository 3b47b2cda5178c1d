package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"
)

// errNoStatfs says that this system cannot tell free space.
var errNoStatfs = errors.New("free space unknown on this system")

// spaceCheckEvery spaces the looks at the spool's free space: a statfs is
// cheap, but on a shared spool (NFS) it is a round trip.
const spaceCheckEvery = time.Second

// noSpaceHold is how long a write refused by a quota (EDQUOT) keeps the
// spool refusing whatever statfs says: a quota is not in the free space
// statfs reports, so without the hold the relay would take mail again a
// second later and fail it at the end of DATA, over and over.
const noSpaceHold = 30 * time.Second

// spaceWatch says whether the spool's file system can take mail: it looks
// at the free space and inodes when asked (by /readyz and at each MAIL),
// at most once per spaceCheckEvery, and a write that failed for want of
// space makes it refuse until a look finds room (after noSpaceHold, for
// a quota).
// The look runs outside the lock: on a spool that hangs (NFS), one caller
// waits for statfs, the others get the last answer. It thus comes
// back by itself once space is freed, although no write tells it so: the
// relay writes nothing while it refuses.
type spaceWatch struct {
	dir     string
	minFree uint64
	// log tells when the spool fills and when it takes mail again, once
	// each: not at each refused MAIL.
	log *slog.Logger

	mu        sync.Mutex
	checkedAt time.Time // when the last look began
	heldUntil time.Time // NoSpace's hold
	full      error
}

func newSpaceWatch(dir string, minFree uint64, log *slog.Logger) *spaceWatch {
	return &spaceWatch{dir: dir, minFree: minFree, log: log}
}

// Full says why the spool cannot take a message now, or nil.
func (w *spaceWatch) Full() error {
	w.mu.Lock()
	now := time.Now()
	if now.Sub(w.checkedAt) < spaceCheckEvery || now.Before(w.heldUntil) {
		defer w.mu.Unlock()
		return w.full
	}
	w.checkedAt = now
	w.mu.Unlock()
	full := w.look()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.checkedAt.After(now) {
		return w.full // a later look, or a failed write (NoSpace), says more
	}
	was := w.full
	w.full = full
	w.changed(was)
	return w.full
}

// look asks the file system whether the spool has room.
func (w *spaceWatch) look() error {
	free, inodes, err := statfs(w.dir)
	switch {
	case errors.Is(err, errNoStatfs):
		// Only failed writes tell on this system: the look after the
		// hold clears.
		return nil
	case err != nil:
		return fmt.Errorf("cannot tell the free space of the spool's file system: %w", err)
	case free < w.minFree:
		return fmt.Errorf("the spool's file system has %s free, less than spool.min_free_space (%s): mail is refused with 452 4.3.1 until space is freed",
			mib(free), mib(w.minFree))
	case inodes == 0:
		return errors.New("the spool's file system has no free inodes: mail is refused with 452 4.3.1 until files are removed")
	}
	return nil
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
// mail until a look finds room, and for noSpaceHold at least when a quota
// refused the write.
func (w *spaceWatch) NoSpace(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	w.checkedAt = now
	if errors.Is(err, syscall.EDQUOT) {
		w.heldUntil = now.Add(noSpaceHold)
	}
	was := w.full
	defer w.changed(was)
	w.full = fmt.Errorf("a message could not be written at %s (%w): mail is refused with 452 4.3.1 until the spool's file system has spool.min_free_space (%s) free",
		now.UTC().Format(time.RFC3339), err, mib(w.minFree))
}

// mib writes a size in MiB, as an operator compares it with df -m.
func mib(n uint64) string { return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20)) }
