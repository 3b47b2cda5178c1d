package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/postgres"
)

// TestCommitOutcomeUnknown: a group's COMMIT lands but its reply is lost.
// Every caller of the group is told so, none has its write run again as if
// the group had not landed: the rows are there once, and the counts match
// them.
func TestCommitOutcomeUnknown(t *testing.T) {
	ctx := context.Background()
	s, db := storeAndDB(t)
	lost := errors.New("connection lost on the COMMIT's reply")
	const n = 16
	var errs []error
	// Rounds of concurrent creates until the failed commit is a group's.
	for round := 0; round < 50; round++ {
		postgres.FailNextCommit(s, lost)
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
	rows := count(t, db, "SELECT COUNT(*) FROM emails")
	counts, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rows != total || counts[backends.StatusAccepted] != total {
		t.Errorf("%d rows and ACCEPTED counted %d after %d creates (%d told the commit failed); want %d and %d",
			rows, counts[backends.StatusAccepted], total, failed, total, total)
	}
	if history := count(t, db, "SELECT COUNT(*) FROM email_statuses"); history != total {
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
