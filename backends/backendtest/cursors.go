package backendtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

var cursorTests = []test[backends.Cursors]{
	{"Cursor", testCursor},
	{"CursorTakeover", testCursorTakeover},
	{"ConcurrentCursorClaims", testConcurrentCursorClaims},
	{"ReadCursor", testReadCursor},
}

const inbox = "imap://bounces@mail.example.com/INBOX"

func claimCursor(t *testing.T, s backends.Cursors, owner string, until time.Time) backends.Cursor {
	t.Helper()
	c, err := s.ClaimCursor(context.Background(), inbox, owner, until)
	if err != nil {
		t.Fatalf("%s claims %s: %v", owner, inbox, err)
	}
	return c
}

func saveCursor(t *testing.T, s backends.Cursors, owner string, last uint32) error {
	t.Helper()
	return s.SaveCursor(context.Background(), inbox, owner, backends.Cursor{UIDValidity: 7, LastUID: last})
}

func testCursor(t *testing.T, s backends.Cursors) {
	ctx := context.Background()
	now := time.Now().UTC()
	if c := claimCursor(t, s, "relay-a", now.Add(time.Minute)); c.UIDValidity != 0 || c.LastUID != 0 || c.Owner != "relay-a" {
		t.Fatalf("first claim: %+v", c)
	}
	if err := saveCursor(t, s, "relay-a", 42); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimCursor(ctx, inbox, "relay-b", now.Add(time.Minute)); !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Errorf("claim of a held cursor: %v", err)
	}
	if err := saveCursor(t, s, "relay-b", 99); !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Errorf("save by another owner: %v", err)
	}
	c := claimCursor(t, s, "relay-a", now.Add(2*time.Minute))
	if c.UIDValidity != 7 || c.LastUID != 42 || c.LeaseUntil.Sub(now.Add(2*time.Minute)).Abs() > time.Millisecond {
		t.Errorf("renewal: %+v", c)
	}
	// Another name is another cursor.
	if c, err := s.ClaimCursor(ctx, "imap://bounces@mail.example.com/Other", "relay-b", now.Add(time.Minute)); err != nil || c.LastUID != 0 {
		t.Errorf("another folder: %+v %v", c, err)
	}
	if _, err := s.ClaimCursor(ctx, "", "relay-a", now); err == nil {
		t.Error("an empty cursor name was accepted")
	}
}

// testCursorTakeover: once the lease ran out another relay takes over where
// the first stopped, and the first can no longer save.
func testCursorTakeover(t *testing.T, s backends.Cursors) {
	now := time.Now().UTC()
	claimCursor(t, s, "relay-a", now.Add(time.Minute))
	if err := saveCursor(t, s, "relay-a", 43); err != nil {
		t.Fatal(err)
	}
	claimCursor(t, s, "relay-a", now.Add(-time.Second)) // the owner lets its lease lapse
	if c := claimCursor(t, s, "relay-b", now.Add(time.Minute)); c.LastUID != 43 || c.Owner != "relay-b" {
		t.Errorf("takeover: %+v", c)
	}
	if err := saveCursor(t, s, "relay-a", 50); !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Errorf("save by the owner that lost the lease: %v", err)
	}
}

func testConcurrentCursorClaims(t *testing.T, s backends.Cursors) {
	ctx := context.Background()
	until := time.Now().Add(time.Minute)
	var won atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			_, err := s.ClaimCursor(ctx, "race", fmt.Sprintf("relay-%d", i), until)
			switch {
			case err == nil:
				won.Add(1)
			case !errors.Is(err, backends.ErrLockNotAcquired):
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if won.Load() != 1 {
		t.Errorf("%d relays hold the cursor, want 1", won.Load())
	}
}

// testReadCursor: a cursor is read as it is, its lease left alone.
func testReadCursor(t *testing.T, s backends.Cursors) {
	ctx := context.Background()
	if c, err := s.ReadCursor(ctx, "never-claimed"); err != nil || c != (backends.Cursor{}) {
		t.Fatalf("a cursor never claimed: %+v %v", c, err)
	}
	until := time.Now().UTC().Add(time.Hour)
	claimCursor(t, s, "relay-a", until)
	if err := saveCursor(t, s, "relay-a", 9); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		c, err := s.ReadCursor(ctx, inbox)
		if err != nil || c.Owner != "relay-a" || c.LastUID != 9 || c.LeaseUntil.Sub(until).Abs() > time.Millisecond {
			t.Fatalf("read: %+v %v", c, err)
		}
	}
	if _, err := s.ClaimCursor(ctx, inbox, "relay-b", time.Now().Add(time.Minute)); !errors.Is(err, backends.ErrLockNotAcquired) {
		t.Errorf("a read took the lease: %v", err)
	}
}
