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
	want := `# HELP postino_suppressions Active entries of the suppression list, by reason.
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
