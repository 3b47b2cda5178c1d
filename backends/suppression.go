package backends

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Suppressions holds the addresses the relay must not mail: the ones whose
// server said they do not exist, the ones who complained or unsubscribed,
// and those an operator added. Entries are kept apart from the messages, so
// that they outlive the retention that purges the messages they came from,
// and every relay sharing the store reads the same list.
type Suppressions interface {
	// Suppress applies c to the entry of c.Entry's address and scope, as
	// SuppressionChange.Apply rules, in one transaction with its history
	// row, and returns the entry as it stands afterwards.
	Suppress(ctx context.Context, c SuppressionChange) (Suppression, error)
	// Suppressed returns the entries that block any of addrs for stream:
	// those of scope ScopeAll or stream that are active and not expired at
	// now, each once. It is one lookup for a message's recipients, whatever
	// their number (SuppressionKeys gives the keys to look up).
	Suppressed(ctx context.Context, stream string, addrs []string, now time.Time) ([]Suppression, error)
	// SuppressionsOf returns every entry of the address, of any scope, the
	// ones that are not active yet included.
	SuppressionsOf(ctx context.Context, addr string) ([]Suppression, error)
	// Unsuppress removes the entry of the address and scope, with a
	// history row saying who and why; ErrNotFound when there is none.
	Unsuppress(ctx context.Context, r SuppressionRemoval) error
	// SuppressionHistory returns the changes of the address's entries,
	// oldest first; they stay after an entry is removed.
	SuppressionHistory(ctx context.Context, addr string) ([]SuppressionEvent, error)
	// ListSuppressions returns a page of active entries in key order (the
	// key, then the scope) and the cursor of the next page, empty when
	// there is none.
	ListSuppressions(ctx context.Context, q SuppressionQuery) ([]Suppression, string, error)
	// SuppressionCounts returns how many active entries each reason holds.
	SuppressionCounts(ctx context.Context) (map[SuppressionReason]int, error)
	// ImportSuppressions writes entries, as PrepareImport left them, each
	// replacing the entry of its address and scope, with a history row
	// each saying by. Stores
	// that can write them in one transaction do; the others write them in
	// order, and an import run again after a failure ends the same.
	ImportSuppressions(ctx context.Context, entries []Suppression, by string) error
	// PruneSuppressions removes up to limit entries that expired before
	// now, and returns how many it removed.
	PruneSuppressions(ctx context.Context, now time.Time, limit int) (int, error)
}

// SuppressionReason is why an address is suppressed.
type SuppressionReason string

// Suppression reasons.
const (
	ReasonHardBounce  SuppressionReason = "hard_bounce"
	ReasonComplaint   SuppressionReason = "complaint"
	ReasonUnsubscribe SuppressionReason = "unsubscribe"
	ReasonManual      SuppressionReason = "manual"
	ReasonImport      SuppressionReason = "import"
)

// SuppressionReasons lists every reason.
func SuppressionReasons() []SuppressionReason {
	return []SuppressionReason{ReasonHardBounce, ReasonComplaint, ReasonUnsubscribe, ReasonManual, ReasonImport}
}

// ParseSuppressionReason accepts a reason's name in any letter case.
func ParseSuppressionReason(s string) (SuppressionReason, error) {
	r := SuppressionReason(strings.ToLower(strings.TrimSpace(s)))
	for _, known := range SuppressionReasons() {
		if r == known {
			return r, nil
		}
	}
	return "", fmt.Errorf("unknown suppression reason %q: use one of hard_bounce, complaint, unsubscribe, manual, import", s)
}

// ScopeAll is the scope of an entry that blocks every stream.
const ScopeAll = "*"

// Suppression is one entry of the list: an address, the streams it blocks,
// and why.
type Suppression struct {
	// Address is the address as it was first suppressed; Key is the one
	// entries match by (SuppressionKey).
	Address string            `json:"address"`
	Key     string            `json:"key"`
	Scope   string            `json:"scope"`
	Reason  SuppressionReason `json:"reason"`
	// The evidence: the message that made the entry, the reply or report
	// code and text, and the report's id (a DSN's or an ARF report's).
	MessageID  string `json:"message_id,omitempty"`
	Code       string `json:"code,omitempty"`
	Diagnostic string `json:"diagnostic,omitempty"`
	ReportID   string `json:"report_id,omitempty"`
	// Created is when the entry began to block; Expires, when it stops
	// (zero: never).
	Created time.Time `json:"created"`
	Expires time.Time `json:"expires,omitzero"`
	// Strikes counts the verdicts seen since FirstStrike, for rules that
	// need more than one; Active says whether the entry blocks yet.
	Strikes     int       `json:"strikes"`
	FirstStrike time.Time `json:"first_strike"`
	Active      bool      `json:"active"`
	// ChangedBy and Changed say who made the last change and when.
	ChangedBy string    `json:"changed_by"`
	Changed   time.Time `json:"changed"`
}

// Blocks says whether the entry blocks mail at now.
func (s Suppression) Blocks(now time.Time) bool {
	return s.Active && (s.Expires.IsZero() || now.Before(s.Expires))
}

// SuppressionChange is a verdict, a complaint, an unsubscribe or an
// operator's entry, to be applied to the list.
type SuppressionChange struct {
	// Entry is the address, scope, reason and evidence; its Created is the
	// change's time, and Expires, when set, its end.
	Entry Suppression
	// By says who made it: "relay HOST", "operator NAME", "unsubscribe".
	By string
	// Need is how many changes within Within make the entry active; 0 and
	// 1 make it active at once.
	Need   int
	Within time.Duration
}

// Apply returns the entry that c makes of cur (nil when the address and
// scope have none), and whether it differs. An active entry that has not
// expired stays as it is: its first evidence is the one kept; so does one
// whose last strike came from the same report, read again. Otherwise the
// change is a strike, counted with the earlier ones of the same window, and
// the entry becomes active once they reach Need.
func (c SuppressionChange) Apply(cur *Suppression) (Suppression, bool) {
	now := c.Entry.Created
	if cur != nil && cur.Blocks(now) {
		return *cur, false
	}
	if cur != nil && c.Entry.ReportID != "" && cur.ReportID == c.Entry.ReportID {
		// The report of the last strike, read again: one strike.
		return *cur, false
	}
	next := c.Entry
	next.Strikes, next.FirstStrike = 1, now
	if cur != nil && !cur.Active && now.Sub(cur.FirstStrike) <= c.Within {
		next.Strikes, next.FirstStrike = cur.Strikes+1, cur.FirstStrike
	}
	next.Active = next.Strikes >= max(c.Need, 1)
	next.ChangedBy, next.Changed = c.By, now
	return next, true
}

// Check validates the change's entry and fills its key.
func (c *SuppressionChange) Check() error {
	return c.Entry.Check()
}

// Check validates the entry (its address, scope and reason) and fills its
// Key.
func (s *Suppression) Check() error {
	key, err := SuppressionKey(s.Address)
	if err != nil {
		return err
	}
	s.Key = key
	if s.Scope == "" {
		s.Scope = ScopeAll
	}
	if s.Scope != ScopeAll {
		if err := CheckStream(s.Scope); err != nil {
			return err
		}
	}
	if _, err := ParseSuppressionReason(string(s.Reason)); err != nil {
		return err
	}
	if s.Created.IsZero() {
		return errors.New("a suppression needs its time")
	}
	return nil
}

// SuppressionKey is the form of an address entries match by: the domain in
// lower case, the local part as received (RFC 5321 leaves its case to the
// receiving server, and some do tell cases apart). Angle brackets and
// surrounding spaces are dropped. An address without a local part or a
// domain has no key.
func SuppressionKey(addr string) (string, error) {
	a := strings.TrimSpace(addr)
	a = strings.TrimSuffix(strings.TrimPrefix(a, "<"), ">")
	at := strings.LastIndexByte(a, '@')
	bad := func(r rune) bool { return r <= ' ' || r == 0x7f || r == '<' || r == '>' }
	if at <= 0 || at == len(a)-1 || strings.ContainsFunc(a, bad) {
		return "", fmt.Errorf("%q is not an address: give it as local-part@domain", addr)
	}
	if len(a) > 320 {
		return "", fmt.Errorf("address of %d characters is longer than an address can be (320)", len(a))
	}
	return a[:at] + "@" + strings.ToLower(a[at+1:]), nil
}

// MaxStreamLength bounds a stream's name.
const MaxStreamLength = 64

// SuppressionKeys returns the keys of addrs, each once, in their order;
// the addresses without a key are left out, since they match nothing.
func SuppressionKeys(addrs []string) []string {
	seen := make(map[string]bool, len(addrs))
	keys := make([]string, 0, len(addrs))
	for _, a := range addrs {
		k, err := SuppressionKey(a)
		if err != nil || seen[k] {
			continue
		}
		seen[k] = true
		keys = append(keys, k)
	}
	return keys
}

// CheckStream validates a stream's name: letters, digits, '-', '_' and '.'.
func CheckStream(name string) error {
	return checkToken("stream name", name, MaxStreamLength, "-_.")
}

// SuppressionRemoval is an operator's removal of an entry.
type SuppressionRemoval struct {
	Address string
	Scope   string
	By      string
	Note    string
	At      time.Time
}

// SuppressionAction is what a history row records.
type SuppressionAction string

// Suppression actions.
const (
	ActionSuppressed SuppressionAction = "suppressed" // the entry became active
	ActionStrike     SuppressionAction = "strike"     // a verdict was counted, not enough yet
	ActionRemoved    SuppressionAction = "removed"
	ActionImported   SuppressionAction = "imported"
	ActionExpired    SuppressionAction = "expired"
)

// SuppressionEvent is one row of an address's history.
type SuppressionEvent struct {
	Key       string            `json:"key"`
	Scope     string            `json:"scope"`
	At        time.Time         `json:"at"`
	Action    SuppressionAction `json:"action"`
	Reason    SuppressionReason `json:"reason,omitempty"`
	By        string            `json:"by"`
	Note      string            `json:"note,omitempty"`
	MessageID string            `json:"message_id,omitempty"`
}

// EventOf is the history row of a change that made next.
func (c SuppressionChange) EventOf(next Suppression) SuppressionEvent {
	action := ActionStrike
	if next.Active {
		action = ActionSuppressed
	}
	note := next.Code
	if next.Diagnostic != "" {
		note = strings.TrimSpace(note + " " + next.Diagnostic)
	}
	return SuppressionEvent{Key: next.Key, Scope: next.Scope, At: next.Changed, Action: action, Reason: next.Reason,
		By: c.By, Note: note, MessageID: next.MessageID}
}

// ImportEvent is the history row of an imported entry.
func ImportEvent(s Suppression, by string) SuppressionEvent {
	return SuppressionEvent{Key: s.Key, Scope: s.Scope, At: s.Changed, Action: ActionImported, Reason: s.Reason, By: by}
}

// RemovalEvent is the history row of a removal.
func (r SuppressionRemoval) RemovalEvent(key string, reason SuppressionReason) SuppressionEvent {
	return SuppressionEvent{Key: key, Scope: r.Scope, At: r.At, Action: ActionRemoved, Reason: reason, By: r.By, Note: r.Note}
}

// SuppressionQuery selects a page of entries.
type SuppressionQuery struct {
	// Prefix keeps the entries whose key starts with it.
	Prefix string
	// Reason, when set, keeps the entries of that reason.
	Reason SuppressionReason
	// After is the cursor ListSuppressions gave for the next page.
	After string
	// Limit bounds the page; zero or less means DefaultPageSize.
	Limit int
}

// PageSize is the number of entries a page of q holds at most.
func (q SuppressionQuery) PageSize() int {
	if q.Limit <= 0 {
		return DefaultPageSize
	}
	return q.Limit
}

// SuppressionCursor is the cursor of the page after s: its key and scope.
func SuppressionCursor(s Suppression) string { return s.Key + "\x00" + s.Scope }

// ParseSuppressionCursor splits a cursor SuppressionCursor made.
func ParseSuppressionCursor(c string) (key, scope string, err error) {
	key, scope, ok := strings.Cut(c, "\x00")
	if !ok {
		return "", "", ErrBadCursor
	}
	return key, scope, nil
}

// PrepareImport checks every entry and fills what an import sets: the key,
// the scope's default, active, the change's author and time. It stops at
// the first bad entry, naming its place.
func PrepareImport(entries []Suppression, by string, now time.Time) error {
	for i := range entries {
		e := &entries[i]
		if e.Created.IsZero() {
			e.Created = now
		}
		if err := e.Check(); err != nil {
			return fmt.Errorf("entry %d: %w", i+1, err)
		}
		e.Active, e.Strikes, e.FirstStrike = true, 1, e.Created
		e.ChangedBy, e.Changed = by, now
	}
	return nil
}
