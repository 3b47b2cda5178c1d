package relay

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSpaceWatch: the spool is full under its minimum free space, or after
// a write failed for want of space until the next look finds room.
func TestSpaceWatch(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if err := newSpaceWatch(dir, 1<<62, log).Full(); err == nil || !strings.Contains(err.Error(), "less than spool.min_free_space") {
		t.Errorf("under the minimum: %v", err)
	}
	w := newSpaceWatch(dir, 1, log)
	if err := w.Full(); err != nil {
		t.Fatalf("with room: %v", err)
	}
	w.NoSpace(fmt.Errorf("spool: write x.eml: %w", syscall.ENOSPC))
	if err := w.Full(); err == nil || !strings.Contains(err.Error(), "no space left on device") {
		t.Errorf("after a failed write: %v", err)
	}
	w.checkedAt = w.checkedAt.Add(-spaceCheckEvery - time.Millisecond) // as if the next look were due
	if err := w.Full(); err != nil {
		t.Errorf("the next look, with room: %v", err)
	}
	// A quota is not in what statfs sees: a write it refused holds past
	// the next look...
	w.NoSpace(fmt.Errorf("spool: write x.eml: %w", syscall.EDQUOT))
	w.checkedAt = w.checkedAt.Add(-spaceCheckEvery - time.Millisecond)
	if err := w.Full(); err == nil {
		t.Error("a look within the hold of a write a quota refused found room")
	}
	// ... and once the hold is over, a look with room clears.
	w.checkedAt, w.heldUntil = w.checkedAt.Add(-noSpaceHold), w.heldUntil.Add(-noSpaceHold)
	if err := w.Full(); err != nil {
		t.Errorf("the look after the hold, with room: %v", err)
	}
}
