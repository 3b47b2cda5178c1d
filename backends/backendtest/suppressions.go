package backendtest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

var suppressionTests = []test[suppressionStore]{
	{"Match", testSuppressionMatch},
	{"Scopes", testSuppressionScopes},
	{"Strikes", testSuppressionStrikes},
	{"StrikesAtOnce", testSuppressionStrikesAtOnce},
	{"FirstEvidenceStays", testSuppressionFirstEvidence},
	{"Expiry", testSuppressionExpiry},
	{"Removal", testSuppressionRemoval},
	{"List", testSuppressionList},
	{"Import", testSuppressionImport},
	{"ManyRecipients", testSuppressionManyRecipients},
	{"OutlivesPurge", testSuppressionOutlivesPurge},
}

type suppressionStore interface {
	messageStore
	backends.Suppressions
}

// hard is a hard verdict on addr, at d after the suite's base.
func hard(addr string, d time.Duration) backends.SuppressionChange {
	return backends.SuppressionChange{
		Entry: backends.Suppression{Address: addr, Scope: backends.ScopeAll, Reason: backends.ReasonHardBounce,
			MessageID: "m-" + addr, Code: "550 5.1.1", Diagnostic: "user unknown", ReportID: "dsn-" + d.String(), Created: at(d)},
		By: "relay test",
	}
}

func suppress(t *testing.T, s suppressionStore, c backends.SuppressionChange) backends.Suppression {
	t.Helper()
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	got, err := s.Suppress(context.Background(), c)
	if err != nil {
		t.Fatalf("Suppress(%s): %v", c.Entry.Address, err)
	}
	return got
}

// blocked returns the keys of the entries that block addrs for stream at now.
func blocked(t *testing.T, s suppressionStore, stream string, now time.Time, addrs ...string) []string {
	t.Helper()
	got, err := s.Suppressed(context.Background(), stream, addrs, now)
	if err != nil {
		t.Fatalf("Suppressed: %v", err)
	}
	var keys []string
	for _, e := range got {
		keys = append(keys, e.Key+" "+e.Scope)
	}
	slices.Sort(keys)
	return keys
}

// testSuppressionMatch: the domain matches in any case, the local part as
// written; the entry keeps what it was made with.
func testSuppressionMatch(t *testing.T, s suppressionStore) {
	got := suppress(t, s, hard("Jane.Doe@Example.COM", 0))
	if !got.Active || got.Key != "Jane.Doe@example.com" || got.Address != "Jane.Doe@Example.COM" {
		t.Errorf("entry %+v", got)
	}
	keys := blocked(t, s, "transactional", at(time.Minute),
		"Jane.Doe@example.com", "<Jane.Doe@EXAMPLE.com>", "jane.doe@example.com", "other@example.com", "not an address")
	if want := []string{"Jane.Doe@example.com *"}; !slices.Equal(keys, want) {
		t.Errorf("Suppressed = %v, want %v", keys, want)
	}
	all, err := s.SuppressionsOf(context.Background(), "jane.doe@EXAMPLE.com")
	if err != nil || len(all) != 0 {
		t.Errorf("SuppressionsOf another local part: %v %v", all, err)
	}
	all, err = s.SuppressionsOf(context.Background(), "Jane.Doe@example.com")
	if err != nil || len(all) != 1 {
		t.Fatalf("SuppressionsOf: %v %v", all, err)
	}
	e := all[0]
	if e.Reason != backends.ReasonHardBounce || e.MessageID != "m-Jane.Doe@Example.COM" || e.Code != "550 5.1.1" ||
		e.Diagnostic != "user unknown" || e.ReportID != "dsn-0s" || !e.Created.Equal(at(0)) || e.ChangedBy != "relay test" ||
		!e.Changed.Equal(at(0)) || !e.Expires.IsZero() {
		t.Errorf("stored entry %+v", e)
	}
}

// testSuppressionScopes: an entry of one stream blocks only it; one of
// every stream blocks all.
func testSuppressionScopes(t *testing.T, s suppressionStore) {
	c := hard("reader@example.net", 0)
	c.Entry.Scope, c.Entry.Reason = "news", backends.ReasonComplaint
	suppress(t, s, c)
	if keys := blocked(t, s, "news", at(time.Minute), "reader@example.net"); len(keys) != 1 {
		t.Errorf("news: %v", keys)
	}
	if keys := blocked(t, s, "transactional", at(time.Minute), "reader@example.net"); len(keys) != 0 {
		t.Errorf("a complaint about news blocks transactional mail: %v", keys)
	}
	suppress(t, s, hard("reader@example.net", time.Second))
	keys := blocked(t, s, "news", at(time.Minute), "reader@example.net")
	if want := []string{"reader@example.net *", "reader@example.net news"}; !slices.Equal(keys, want) {
		t.Errorf("news after a hard verdict: %v, want %v", keys, want)
	}
	if keys := blocked(t, s, "transactional", at(time.Minute), "reader@example.net"); len(keys) != 1 {
		t.Errorf("transactional after a hard verdict: %v", keys)
	}
}

// testSuppressionStrikes: a rule of two verdicts within a window blocks at
// the second; a strike past the window starts the count again.
func testSuppressionStrikes(t *testing.T, s suppressionStore) {
	twice := func(addr string, d time.Duration) backends.SuppressionChange {
		c := hard(addr, d)
		c.Need, c.Within = 2, 30*24*time.Hour
		return c
	}
	if e := suppress(t, s, twice("a@example.org", 0)); e.Active || e.Strikes != 1 {
		t.Errorf("first strike %+v", e)
	}
	if keys := blocked(t, s, "transactional", at(time.Hour), "a@example.org"); len(keys) != 0 {
		t.Errorf("one strike of two blocks: %v", keys)
	}
	if e := suppress(t, s, twice("a@example.org", 24*time.Hour)); !e.Active || e.Strikes != 2 || !e.FirstStrike.Equal(at(0)) {
		t.Errorf("second strike %+v", e)
	}
	if keys := blocked(t, s, "transactional", at(48*time.Hour), "a@example.org"); len(keys) != 1 {
		t.Errorf("two strikes do not block: %v", keys)
	}
	// The same report read again is one strike.
	again := twice("c@example.org", 0)
	suppress(t, s, again)
	again.Entry.Created = at(time.Hour)
	if e := suppress(t, s, again); e.Strikes != 1 || e.Active {
		t.Errorf("a report read again counted twice: %+v", e)
	}
	suppress(t, s, twice("b@example.org", 0))
	if e := suppress(t, s, twice("b@example.org", 31*24*time.Hour)); e.Active || e.Strikes != 1 {
		t.Errorf("a strike past the window counted with the old one: %+v", e)
	}
	h, err := s.SuppressionHistory(context.Background(), "a@example.org")
	if err != nil {
		t.Fatal(err)
	}
	var actions []backends.SuppressionAction
	for _, ev := range h {
		actions = append(actions, ev.Action)
	}
	if want := []backends.SuppressionAction{backends.ActionStrike, backends.ActionSuppressed}; !slices.Equal(actions, want) {
		t.Errorf("history %v, want %v", actions, want)
	}
	if counts, _ := s.SuppressionCounts(context.Background()); counts[backends.ReasonHardBounce] != 1 {
		t.Errorf("counts %v: only the active entry counts", counts)
	}
}

// testSuppressionStrikesAtOnce: two verdicts written at the same time both
// count; neither overwrites the other.
func testSuppressionStrikesAtOnce(t *testing.T, s suppressionStore) {
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := hard("race@example.org", time.Duration(i)*time.Second)
			c.Need, c.Within = 2, time.Hour
			if err := c.Check(); err != nil {
				errs <- err
				return
			}
			_, err := s.Suppress(context.Background(), c)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.SuppressionsOf(context.Background(), "race@example.org")
	if err != nil || len(all) != 1 || !all[0].Active || all[0].Strikes != 2 {
		t.Errorf("after two strikes at once: %+v %v", all, err)
	}
}

// testSuppressionFirstEvidence: a verdict on an address suppressed already
// changes nothing; the first evidence stays.
func testSuppressionFirstEvidence(t *testing.T, s suppressionStore) {
	suppress(t, s, hard("gone@example.com", 0))
	again := hard("gone@example.com", time.Hour)
	again.Entry.MessageID = "later"
	if e := suppress(t, s, again); e.MessageID != "m-gone@example.com" || !e.Created.Equal(at(0)) {
		t.Errorf("a second verdict replaced the first evidence: %+v", e)
	}
	if h, _ := s.SuppressionHistory(context.Background(), "gone@example.com"); len(h) != 1 {
		t.Errorf("a change that changed nothing made history: %+v", h)
	}
}

// testSuppressionExpiry: an entry stops blocking when it expires, and
// pruning removes it, leaving a history row.
func testSuppressionExpiry(t *testing.T, s suppressionStore) {
	c := hard("later@example.com", 0)
	c.Entry.Reason, c.Entry.Expires = backends.ReasonManual, at(time.Hour)
	suppress(t, s, c)
	suppress(t, s, hard("forever@example.com", 0))
	if keys := blocked(t, s, "transactional", at(time.Minute), "later@example.com"); len(keys) != 1 {
		t.Errorf("before expiry: %v", keys)
	}
	if keys := blocked(t, s, "transactional", at(2*time.Hour), "later@example.com"); len(keys) != 0 {
		t.Errorf("after expiry: %v", keys)
	}
	n, err := s.PruneSuppressions(context.Background(), at(2*time.Hour), 100)
	if err != nil || n != 1 {
		t.Fatalf("PruneSuppressions = %d, %v; want 1", n, err)
	}
	if all, _ := s.SuppressionsOf(context.Background(), "later@example.com"); len(all) != 0 {
		t.Errorf("pruned entry still there: %+v", all)
	}
	if all, _ := s.SuppressionsOf(context.Background(), "forever@example.com"); len(all) != 1 {
		t.Errorf("an entry without expiry was pruned: %+v", all)
	}
	h, _ := s.SuppressionHistory(context.Background(), "later@example.com")
	if len(h) != 2 || h[1].Action != backends.ActionExpired {
		t.Errorf("history after expiry %+v", h)
	}
	// An expired entry that was not pruned yet is made again by a new verdict.
	c = hard("again@example.com", 0)
	c.Entry.Expires = at(time.Hour)
	suppress(t, s, c)
	if e := suppress(t, s, hard("again@example.com", 2*time.Hour)); !e.Expires.IsZero() || !e.Created.Equal(at(2*time.Hour)) {
		t.Errorf("a verdict after expiry: %+v", e)
	}
}

// testSuppressionRemoval: an operator removes an entry; history says who
// and why; the address can be suppressed again.
func testSuppressionRemoval(t *testing.T, s suppressionStore) {
	ctx := context.Background()
	suppress(t, s, hard("back@example.com", 0))
	r := backends.SuppressionRemoval{Address: "back@EXAMPLE.com", Scope: backends.ScopeAll, By: "operator ann", Note: "ticket 42", At: at(time.Hour)}
	if err := s.Unsuppress(ctx, r); err != nil {
		t.Fatal(err)
	}
	if keys := blocked(t, s, "transactional", at(2*time.Hour), "back@example.com"); len(keys) != 0 {
		t.Errorf("after removal: %v", keys)
	}
	if err := s.Unsuppress(ctx, r); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("a second removal: %v, want ErrNotFound", err)
	}
	r.Scope = "news"
	if err := s.Unsuppress(ctx, r); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("removal of a scope with no entry: %v, want ErrNotFound", err)
	}
	h, err := s.SuppressionHistory(ctx, "back@example.com")
	if err != nil || len(h) != 2 {
		t.Fatalf("history %+v %v", h, err)
	}
	if h[1].Action != backends.ActionRemoved || h[1].By != "operator ann" || h[1].Note != "ticket 42" || !h[1].At.Equal(at(time.Hour)) ||
		h[1].Reason != backends.ReasonHardBounce {
		t.Errorf("removal's history row %+v", h[1])
	}
	if e := suppress(t, s, hard("back@example.com", 3*time.Hour)); !e.Active {
		t.Errorf("suppressed again after removal: %+v", e)
	}
}

// testSuppressionList pages through active entries, by prefix and reason,
// and counts them by reason.
func testSuppressionList(t *testing.T, s suppressionStore) {
	ctx := context.Background()
	for i := range 7 {
		c := hard(fmt.Sprintf("u%d@list.example", i), 0)
		if i%2 == 1 {
			c.Entry.Reason, c.Entry.Scope = backends.ReasonUnsubscribe, "news"
		}
		suppress(t, s, c)
	}
	suppress(t, s, hard("z@other.example", 0))
	pending := hard("pending@list.example", 0)
	pending.Need = 3
	suppress(t, s, pending)

	var keys []string
	q := backends.SuppressionQuery{Prefix: "u", Limit: 3}
	for pages := 0; ; pages++ {
		page, next, err := s.ListSuppressions(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 3 || pages > 5 {
			t.Fatalf("page of %d, page %d", len(page), pages)
		}
		for _, e := range page {
			keys = append(keys, e.Key)
		}
		if next == "" {
			break
		}
		q.After = next
	}
	want := []string{"u0@list.example", "u1@list.example", "u2@list.example", "u3@list.example", "u4@list.example", "u5@list.example", "u6@list.example"}
	if !slices.Equal(keys, want) {
		t.Errorf("listed %v, want %v", keys, want)
	}
	page, _, err := s.ListSuppressions(ctx, backends.SuppressionQuery{Reason: backends.ReasonUnsubscribe, Limit: 10})
	if err != nil || len(page) != 3 {
		t.Errorf("by reason: %d entries, %v; want 3", len(page), err)
	}
	if page, _, err := s.ListSuppressions(ctx, backends.SuppressionQuery{Prefix: "u"}); err != nil || len(page) != 7 {
		t.Errorf("no limit: %d entries, %v; want a default page with the 7", len(page), err)
	}
	if _, _, err := s.ListSuppressions(ctx, backends.SuppressionQuery{After: "garbage", Limit: 10}); !errors.Is(err, backends.ErrBadCursor) {
		t.Errorf("a bad cursor: %v, want ErrBadCursor", err)
	}
	counts, err := s.SuppressionCounts(ctx)
	if err != nil || counts[backends.ReasonHardBounce] != 5 || counts[backends.ReasonUnsubscribe] != 3 {
		t.Errorf("counts %v %v, want 5 hard_bounce (not the pending one) and 3 unsubscribe", counts, err)
	}
}

// testSuppressionImport writes a list at once; an entry replaces the one
// of its address and scope.
func testSuppressionImport(t *testing.T, s suppressionStore) {
	ctx := context.Background()
	suppress(t, s, hard("old@import.example", 0))
	var entries []backends.Suppression
	for i := range 1000 {
		entries = append(entries, backends.Suppression{Address: fmt.Sprintf("r%04d@import.example", i), Reason: backends.ReasonImport})
	}
	entries = append(entries, backends.Suppression{Address: "old@import.example", Scope: backends.ScopeAll, Reason: backends.ReasonManual,
		Expires: at(48 * time.Hour), Created: at(-time.Hour)})
	if err := backends.PrepareImport(entries, "operator ann", at(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.ImportSuppressions(ctx, entries, "operator ann"); err != nil {
		t.Fatal(err)
	}
	counts, err := s.SuppressionCounts(ctx)
	if err != nil || counts[backends.ReasonImport] != 1000 || counts[backends.ReasonManual] != 1 || counts[backends.ReasonHardBounce] != 0 {
		t.Errorf("counts after import %v %v", counts, err)
	}
	all, _ := s.SuppressionsOf(ctx, "old@import.example")
	if len(all) != 1 || all[0].Reason != backends.ReasonManual || !all[0].Expires.Equal(at(48*time.Hour)) || !all[0].Created.Equal(at(-time.Hour)) {
		t.Errorf("imported over an entry: %+v", all)
	}
	if keys := blocked(t, s, "news", at(2*time.Hour), "r0999@import.example", "r0000@IMPORT.example"); len(keys) != 2 {
		t.Errorf("imported entries block: %v", keys)
	}
	h, _ := s.SuppressionHistory(ctx, "r0001@import.example")
	if len(h) != 1 || h[0].Action != backends.ActionImported || h[0].By != "operator ann" {
		t.Errorf("history of an imported entry %+v", h)
	}
	bad := []backends.Suppression{{Address: "fine@example.com", Reason: backends.ReasonImport}, {Address: "nodomain", Reason: backends.ReasonImport}}
	if err := backends.PrepareImport(bad, "x", at(0)); err == nil {
		t.Error("PrepareImport took an address without a domain")
	}
}

// testSuppressionManyRecipients: one lookup answers for a message of 250
// recipients, more than a store's single round trip may hold.
func testSuppressionManyRecipients(t *testing.T, s suppressionStore) {
	var addrs []string
	for i := range 250 {
		addrs = append(addrs, fmt.Sprintf("r%03d@many.example", i))
		if i%50 == 7 {
			suppress(t, s, hard(addrs[i], 0))
		}
	}
	if keys := blocked(t, s, "transactional", at(time.Minute), addrs...); len(keys) != 5 {
		t.Errorf("among 250 recipients: %v, want 5", keys)
	}
}

// testSuppressionOutlivesPurge: purging the message an entry came from
// leaves the entry.
func testSuppressionOutlivesPurge(t *testing.T, s suppressionStore) {
	m := walk(t, s, "evidence", backends.StatusSentAcknowledged)
	c := hard("a@example.net", 0)
	c.Entry.MessageID = m.ID
	suppress(t, s, c)
	if _, err := s.Purge(context.Background(), time.Now().Add(time.Hour), 10); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(context.Background(), m.ID); !errors.Is(err, backends.ErrNotFound) {
		t.Fatalf("message not purged: %v", err)
	}
	if keys := blocked(t, s, "transactional", time.Now(), "a@example.net"); len(keys) != 1 {
		t.Errorf("the entry went with its message: %v", keys)
	}
}
