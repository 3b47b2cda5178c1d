package backends

import (
	"fmt"
	"time"
)

// Cursor is how far a mailbox poller has read a folder: the UIDs up to
// LastUID of the folder's UIDVALIDITY are handled. Relays sharing a store
// share their mailboxes through it: one at a time polls each, under a
// lease.
type Cursor struct {
	UIDValidity uint32    `json:"uid_validity"`
	LastUID     uint32    `json:"last_uid"`
	Owner       string    `json:"owner"`
	LeaseUntil  time.Time `json:"lease_until"`
}

// Claim gives owner the lease until the given time, at now: when nobody
// holds it, owner holds it already, or the holder's lease ran out. It
// returns ErrLockNotAcquired while another owner's lease runs.
func (c Cursor) Claim(owner string, until, now time.Time) (Cursor, error) {
	if c.Owner != "" && c.Owner != owner && now.Before(c.LeaseUntil) {
		return c, fmt.Errorf("cursor held by %s until %s: %w", c.Owner, c.LeaseUntil.Format(time.RFC3339), ErrLockNotAcquired)
	}
	c.Owner, c.LeaseUntil = owner, until.UTC()
	return c, nil
}

// Save moves the cursor to where owner has read (next's UIDVALIDITY and
// last UID); ErrLockNotAcquired when owner does not hold the cursor, as
// when another relay took it over after owner's lease ran out.
func (c Cursor) Save(owner string, next Cursor) (Cursor, error) {
	if c.Owner != owner {
		return c, fmt.Errorf("cursor held by %q, not %s: %w", c.Owner, owner, ErrLockNotAcquired)
	}
	c.UIDValidity, c.LastUID = next.UIDValidity, next.LastUID
	return c, nil
}

// CheckCursorName accepts the name of a mailbox cursor.
func CheckCursorName(name string) error {
	if name == "" || len(name) > 255 {
		return fmt.Errorf("cursor name %q: give 1 to 255 characters", name)
	}
	return nil
}
