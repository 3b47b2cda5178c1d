package main

import (
	"context"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
)

// importer is what fill needs of a store.
type importer interface {
	ImportSuppressions(ctx context.Context, entries []backends.Suppression, by string) error
}

// streams are the scopes of the entries that block one stream only;
// "transactional" is the stream of load.sh's messages (no route names
// another).
var streams = []string{"transactional", "marketing"}

// address is the i-th entry's address: its local part tells entries
// apart, its domain one of a hundred, none of them one a load mails.
func address(i int) string {
	return fmt.Sprintf("sup%08d@d%02d.suppressed.example", i, i%100)
}

// missAddress is an address of the same domains that no entry holds.
func missAddress(i int) string {
	return fmt.Sprintf("miss%08d@d%02d.suppressed.example", i, i%100)
}

// entry is the i-th entry of the list, as a CSV import would give it:
// seven in ten block every stream, the rest one stream; every reason
// takes its turn; the hard bounces carry their evidence; one in twenty
// expires in a year.
func entry(i int, now time.Time) backends.Suppression {
	reasons := backends.SuppressionReasons()
	e := backends.Suppression{Address: address(i), Scope: backends.ScopeAll, Reason: reasons[i%len(reasons)],
		Created: now.Add(-time.Duration(i%1000) * time.Hour)}
	if i%10 >= 7 {
		e.Scope = streams[i%10%len(streams)]
	}
	if e.Reason == backends.ReasonHardBounce {
		e.Code, e.Diagnostic = "550 5.1.1", "user unknown"
	}
	if i%20 == 0 {
		e.Expires = now.Add(365 * 24 * time.Hour)
	}
	return e
}

type fillTimes struct{ prepare, store time.Duration }

// fill imports n entries in one import, as `postino suppression import`
// does with a file of n lines, and times its two steps.
func fill(ctx context.Context, s importer, n int, now time.Time) (fillTimes, error) {
	var t fillTimes
	entries := make([]backends.Suppression, n)
	for i := range entries {
		entries[i] = entry(i, now)
	}
	const by = "operator bench"
	start := time.Now()
	if err := backends.PrepareImport(entries, by, now); err != nil {
		return t, err
	}
	t.prepare = time.Since(start)
	start = time.Now()
	if err := s.ImportSuppressions(ctx, entries, by); err != nil {
		return t, err
	}
	t.store = time.Since(start)
	return t, nil
}
