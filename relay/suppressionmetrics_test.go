package relay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/outboxtest"
)

type countsFunc func(ctx context.Context) (map[backends.SuppressionReason]int, error)

func (f countsFunc) SuppressionCounts(ctx context.Context) (map[backends.SuppressionReason]int, error) {
	return f(ctx)
}

func TestSuppressionCollector(t *testing.T) {
	store := outboxtest.Store(t)
	now := time.Now()
	entries := []backends.Suppression{
		{Address: "a@example.com", Reason: backends.ReasonHardBounce},
		{Address: "b@example.com", Reason: backends.ReasonHardBounce},
		{Address: "c@example.com", Scope: "news", Reason: backends.ReasonUnsubscribe},
	}
	if err := backends.PrepareImport(entries, "test", now); err != nil {
		t.Fatal(err)
	}
	if err := store.ImportSuppressions(context.Background(), entries, "test"); err != nil {
		t.Fatal(err)
	}
	want := `# HELP postino_suppressions Active entries of the suppression list, by reason (read at most once a minute).
# TYPE postino_suppressions gauge
postino_suppressions{reason="complaint"} 0
postino_suppressions{reason="hard_bounce"} 2
postino_suppressions{reason="import"} 0
postino_suppressions{reason="manual"} 0
postino_suppressions{reason="unsubscribe"} 1
`
	if err := testutil.CollectAndCompare(newSuppressionCollector(store), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	down := newSuppressionCollector(countsFunc(func(context.Context) (map[backends.SuppressionReason]int, error) {
		return nil, errors.New("the store is down")
	}))
	if err := testutil.CollectAndCompare(down, strings.NewReader("")); err == nil || !strings.Contains(err.Error(), "the store is down") {
		t.Errorf("a store that is down: %v", err)
	}
}

// TestSuppressionCollectorReadsOncePerMinute: scrapes within countsFor
// report the counts read at the first; a failed read is not kept.
func TestSuppressionCollectorReadsOncePerMinute(t *testing.T) {
	reads, fail := 0, true
	c := newSuppressionCollector(countsFunc(func(context.Context) (map[backends.SuppressionReason]int, error) {
		reads++
		if fail {
			return nil, errors.New("the store is down")
		}
		return map[backends.SuppressionReason]int{backends.ReasonManual: reads}, nil
	}))
	if err := testutil.CollectAndCompare(c, strings.NewReader("")); err == nil {
		t.Fatal("a store that is down: no error")
	}
	fail = false
	want := `# HELP postino_suppressions Active entries of the suppression list, by reason (read at most once a minute).
# TYPE postino_suppressions gauge
postino_suppressions{reason="complaint"} 0
postino_suppressions{reason="hard_bounce"} 0
postino_suppressions{reason="import"} 0
postino_suppressions{reason="manual"} 2
postino_suppressions{reason="unsubscribe"} 0
`
	for range 3 {
		if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
			t.Error(err)
		}
	}
	if reads != 2 {
		t.Errorf("%d reads of the store, want 2 (one failed, then one for three scrapes)", reads)
	}
}
