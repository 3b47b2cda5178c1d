package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

// The checks below are those of the SQL stores (MySQL, PostgreSQL) beyond
// the contract: how their group commit, their bytes' chunks and their
// claims behave, looked at in their tables. Each store's tests run them
// with a connection of their own (Tables) and the hooks their export_test
// gives (SQL).

// Tables is a look at a SQL store's tables beside the store, through a
// connection of the test's own.
type Tables struct {
	// Scan reads the one value query returns into dest.
	Scan func(query string, dest any) error
	// Exec runs a statement.
	Exec func(query string) error
}

// Count reads the one number query returns; NULL reads 0.
func (x Tables) Count(t testing.TB, query string) int {
	t.Helper()
	var n *int64
	if err := x.Scan(query, &n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	if n == nil {
		return 0
	}
	return int(*n)
}

// Run runs a statement.
func (x Tables) Run(t testing.TB, query string) {
	t.Helper()
	if err := x.Exec(query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// Opened is s, open, closed with the test; or the test fails with err.
func Opened[S interface{ Close() error }](t testing.TB, s S, err error) S {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// SQLStore is a SQL store as the checks below use it.
type SQLStore interface {
	backends.Outbox
	ReceiptStore
	BodyStore
}

// SQL is a SQL store under the checks below, with its tables and its test
// hooks.
type SQL struct {
	Store  SQLStore
	Tables Tables
	// SetBodyBudget bounds the bytes of a statement of message bytes.
	SetBodyBudget func(n int)
	// FailNextCommit makes the next COMMIT that lands answer err.
	FailNextCommit func(err error)
}

// Bodies keeps message bytes in the store: created with the row, read
// back whole whatever their size, cut in chunks and statements within the
// budget, kept once for a duplicate, deleted with the row.
func Bodies(t *testing.T, x SQL) {
	ctx := context.Background()
	s, db := x.Store, x.Tables
	const budget = 64 << 10
	x.SetBodyBudget(budget)
	sizes := []int{0, 1, 4 << 10, budget - 1, budget, budget + 1, 5*budget + 17}
	want := map[string][]byte{}
	var wg sync.WaitGroup
	errs := make(chan error, len(sizes))
	for i, n := range sizes {
		id := fmt.Sprintf("body-%d", i)
		body := RandomBytes(n)
		want[id] = body
		wg.Go(func() { // concurrent: a group commit holds several bodies
			if err := s.Create(ctx, BodyMessage(id, "0123456789ab", body)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for id, b := range want {
		if got := ReadBody(t, s, id); !bytes.Equal(got, b) {
			t.Errorf("%s: read %d bytes back, want %d, equal %v", id, len(got), len(b), bytes.Equal(got, b))
		}
	}
	chunks, largest := db.Count(t, "SELECT COUNT(*) FROM email_bodies"), db.Count(t, "SELECT MAX(LENGTH(data)) FROM email_bodies")
	if largest > budget || chunks < len(sizes)+5 {
		t.Errorf("%d chunks, the largest %d bytes: want each within %d", chunks, largest, budget)
	}

	// A second submission of an id keeps the first one's bytes.
	dup := BodyMessage("body-2", "0123456789ab", []byte("another message"))
	dup.EmlPath = backends.BodyRef("body-2", "ba9876543210")
	if err := s.Create(ctx, dup); !errors.Is(err, backends.ErrDuplicate) {
		t.Fatalf("duplicate create: %v", err)
	}
	if got := ReadBody(t, s, "body-2"); !bytes.Equal(got, want["body-2"]) {
		t.Error("a duplicate changed the first submission's bytes")
	}
	if _, err := s.OpenBody(ctx, "nobody"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("OpenBody of no message: %v", err)
	}
	// A message of the spool keeps no bytes in the store.
	spooled := BodyMessage("spooled", "0123456789ab", nil)
	spooled.EmlPath = "20260101/0000/spooled.0123456789ab.eml"
	if err := s.Create(ctx, spooled); err != nil {
		t.Fatal(err)
	}
	if _, err := s.OpenBody(ctx, "spooled"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("OpenBody of a spooled message: %v", err)
	}

	// The bytes go with the row.
	db.Run(t, "DELETE FROM emails WHERE id LIKE 'body-%'")
	if n := db.Count(t, "SELECT COUNT(*) FROM email_bodies"); n != 0 {
		t.Errorf("%d chunks left after their rows were deleted", n)
	}
}

// ReceiptsChunked keeps a receipt in chunks and statements within the
// budget, listed from its first chunk, deleted with the row.
func ReceiptsChunked(t *testing.T, x SQL) {
	ctx := context.Background()
	s, db := x.Store, x.Tables
	const budget = 64 << 10
	x.SetBodyBudget(budget)
	if err := s.Create(ctx, BodyMessage("pec-1", "0123456789ab", []byte("Subject: x\r\n\r\nx\r\n"))); err != nil {
		t.Fatal(err)
	}
	raw := RandomBytes(5*budget + 17)
	if err := s.SaveReceipt(ctx, "pec-1", "avvenuta-consegna.eml", raw); err != nil {
		t.Fatal(err)
	}
	r, err := s.OpenReceipt(ctx, "pec-1", "avvenuta-consegna.eml")
	if got := readAll(t, r, err, "the receipt"); !bytes.Equal(got, raw) {
		t.Errorf("read %d bytes back, want %d", len(got), len(raw))
	}
	chunks, largest := db.Count(t, "SELECT COUNT(*) FROM email_receipts"), db.Count(t, "SELECT MAX(LENGTH(data)) FROM email_receipts")
	if chunks != 6 || largest > budget {
		t.Errorf("%d chunks, the largest %d bytes: want 6, each within %d", chunks, largest, budget)
	}
	if list, err := s.Receipts(ctx, "pec-1"); err != nil || len(list) != 1 || list[0].Size != int64(len(raw)) {
		t.Errorf("listed %+v, %v", list, err)
	}
	db.Run(t, "DELETE FROM emails WHERE id = 'pec-1'")
	if n := db.Count(t, "SELECT COUNT(*) FROM email_receipts"); n != 0 {
		t.Errorf("%d chunks left after their row was deleted", n)
	}
}

// CommitOutcomeUnknown: a group's COMMIT lands but its reply is lost.
// Every caller of the group is told so, none has its write run again as if
// the group had not landed: the rows are there once, and the counts match
// them.
func CommitOutcomeUnknown(t *testing.T, x SQL) {
	ctx := context.Background()
	s, db := x.Store, x.Tables
	lost := errors.New("connection lost on the COMMIT's reply")
	const n = 16
	var errs []error
	// Rounds of concurrent creates until the failed commit is a group's.
	for round := 0; round < 50; round++ {
		x.FailNextCommit(lost)
		got := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				got[i] = s.Create(ctx, &backends.Message{ID: fmt.Sprintf("unknown-%02d-%02d", round, i), Priority: 2,
					EmlPath: fmt.Sprintf("%02d-%02d.eml", round, i), Envelope: backends.Envelope{Sender: "a@example.com", Recipients: []string{"b@example.net"}}})
			})
		}
		wg.Wait()
		errs = append(errs, got...)
		failed := 0
		for _, err := range got {
			if err != nil {
				failed++
			}
		}
		if failed > 1 {
			break
		}
	}
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			if !errors.Is(err, lost) || !errors.Is(err, backends.ErrOutcomeUnknown) {
				t.Errorf("a caller of the failed commit got %v, want the commit's error as backends.ErrOutcomeUnknown", err)
			}
		}
	}
	total := len(errs)
	rows := db.Count(t, "SELECT COUNT(*) FROM emails")
	counts, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rows != total || counts[backends.StatusAccepted] != total {
		t.Errorf("%d rows and ACCEPTED counted %d after %d creates (%d told the commit failed); want %d and %d",
			rows, counts[backends.StatusAccepted], total, failed, total, total)
	}
	if history := db.Count(t, "SELECT COUNT(*) FROM email_statuses"); history != total {
		t.Errorf("%d history rows for %d creates", history, total)
	}
	if failed < 2 {
		t.Fatal("no group of creates was told its commit failed")
	}
	// The app's retry of a create told of the failure finds its message.
	for i, err := range errs {
		if err != nil {
			id := fmt.Sprintf("unknown-%02d-%02d", i/n, i%n)
			if err := s.Create(ctx, &backends.Message{ID: id, Priority: 2, EmlPath: "retry.eml"}); !errors.Is(err, backends.ErrDuplicate) {
				t.Errorf("retry of %s: %v, want ErrDuplicate", id, err)
			}
		}
	}
}

// SuspendWhileCreating suspends a batch while its messages are being
// created: every one of them, created before or after, is held.
func SuspendWhileCreating(t *testing.T, s backends.Outbox) {
	ctx := context.Background()
	const total = 200
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, total+1)
	for range 8 {
		wg.Go(func() {
			for n := next.Add(1); n <= total; n = next.Add(1) {
				if n == total/2 {
					errs <- s.SuspendBatch(ctx, "camp")
				}
				id := fmt.Sprintf("camp-%d", n)
				errs <- s.Create(ctx, &backends.Message{ID: id, Priority: 2, Batch: "camp", EmlPath: id + ".eml"})
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	claim := func(from, to backends.Status) int {
		t.Helper()
		ms, err := s.Claim(ctx, backends.Claim{From: from, To: to, Now: now.Add(time.Minute), LeaseUntil: now.Add(time.Hour), Limit: 2 * total})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if to == backends.StatusIntaking {
				if err := s.Transition(ctx, backends.Transition{ID: m.ID, From: to, To: backends.StatusReady, At: now}); err != nil {
					t.Fatal(err)
				}
			}
		}
		return len(ms)
	}
	// A suspended batch is taken in and prepared, not sent.
	if n := claim(backends.StatusAccepted, backends.StatusIntaking); n != total {
		t.Fatalf("intake claimed %d of %d", n, total)
	}
	if n := claim(backends.StatusReady, backends.StatusProcessing); n != 0 {
		t.Errorf("%d messages of the suspended batch claimed for delivery", n)
	}
	if err := s.ActivateBatch(ctx, "camp"); err != nil {
		t.Fatal(err)
	}
	if n := claim(backends.StatusReady, backends.StatusProcessing); n != total {
		t.Errorf("claimed %d of %d after activation", n, total)
	}
}

// ConcurrentClaimsShareAGroup: claims of one message each, made at once,
// meet in one group commit; each must still get a message of its own while
// any is due.
func ConcurrentClaimsShareAGroup(t *testing.T, s backends.Outbox) {
	ctx := context.Background()
	const claimers, rounds = 8, 25
	for i := range claimers * rounds {
		id := fmt.Sprintf("one-%d", i)
		if err := s.Create(ctx, &backends.Message{ID: id, Priority: 2, EmlPath: id + ".eml"}); err != nil {
			t.Fatal(err)
		}
	}
	var taken sync.Map
	var wg sync.WaitGroup
	for range claimers {
		wg.Go(func() {
			for range rounds {
				now := time.Now().UTC()
				ms, err := s.Claim(ctx, backends.Claim{From: backends.StatusAccepted, To: backends.StatusIntaking, Now: now,
					LeaseUntil: now.Add(time.Minute), Limit: 1})
				if err != nil || len(ms) != 1 {
					t.Errorf("a claim of one got %d messages, %v, with more due", len(ms), err)
					return
				}
				if _, dup := taken.LoadOrStore(ms[0].ID, true); dup {
					t.Errorf("%s claimed twice", ms[0].ID)
				}
			}
		})
	}
	wg.Wait()
}

// FailOnce is a hook that answers err once, then nil: a SQL store's
// FailNextCommit answers a COMMIT that landed with it, as a connection
// lost on the reply would.
func FailOnce(err error) func() error {
	var once sync.Once
	return func() error {
		fail := false
		once.Do(func() { fail = true })
		if fail {
			return err
		}
		return nil
	}
}

// ConcurrentTrips: relays tripping a batch at once each run TripBatch;
// exactly one is told it suspended the batch, and the tally holds its
// reason.
func ConcurrentTrips(t *testing.T, s backends.Outbox) {
	ctx := context.Background()
	const relays, rounds = 8, 10
	for round := range rounds {
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			winners = make(chan string, relays)
		)
		for r := range relays {
			wg.Go(func() {
				<-start
				reason := fmt.Sprintf("relay %d", r)
				tripped, err := s.TripBatch(ctx, "camp", reason, time.Now())
				if err != nil {
					t.Errorf("round %d: TripBatch: %v", round, err)
				}
				if tripped {
					winners <- reason
				}
			})
		}
		close(start)
		wg.Wait()
		close(winners)
		var won []string
		for w := range winners {
			won = append(won, w)
		}
		if len(won) != 1 {
			t.Fatalf("round %d: %d relays were told they tripped the batch (%v), want 1", round, len(won), won)
		}
		got, err := s.BatchTallies(ctx, []string{"camp"})
		if err != nil || got["camp"].Tripped != won[0] {
			t.Fatalf("round %d: tally %+v, %v; want tripped by %s", round, got["camp"], err, won[0])
		}
		if err := s.ActivateBatch(ctx, "camp"); err != nil {
			t.Fatal(err)
		}
	}
}
