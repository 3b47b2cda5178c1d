package backends

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestCommitGroup(t *testing.T) {
	bad := errors.New("bad write")
	lost := fmt.Errorf("reply lost: %w", ErrOutcomeUnknown)
	for _, tc := range []struct {
		name  string
		group []string
		fail  func(g []string) error // the outcome of running g
		want  []error                // nil: the group committed
		runs  int
	}{
		{"committed", []string{"a", "b"}, func([]string) error { return nil }, nil, 1},
		{"one bad write fails only itself", []string{"a", "bad", "c"}, func(g []string) error {
			if slices.Contains(g, "bad") {
				return bad
			}
			return nil
		}, []error{nil, bad, nil}, 4},
		{"outcome unknown: told to each, not run again", []string{"a", "b"}, func([]string) error { return lost },
			[]error{lost, lost}, 1},
		{"a group of one is not run again", []string{"bad"}, func([]string) error { return bad }, []error{bad}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := 0
			got := CommitGroup(tc.group, func(g []string) error { runs++; return tc.fail(g) })
			if !slices.EqualFunc(got, tc.want, func(a, b error) bool { return a == b }) || runs != tc.runs {
				t.Errorf("errors %v after %d runs; want %v after %d", got, runs, tc.want, tc.runs)
			}
		})
	}
}

// TestChangesTake: the counts come in status order, those that sum to
// zero left out, and Take forgets what it returned.
func TestChangesTake(t *testing.T) {
	var c Changes
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	c.Add("m1", StatusReady, "r", at, nil)
	c.Count(StatusReady, 1)
	c.Count(StatusAccepted, -1)
	c.Count(StatusProcessing, 1)
	c.Count(StatusProcessing, -1)
	history, statuses, deltas := c.Take()
	if len(history) != 1 || history[0].MessageID != "m1" || history[0].Status != StatusReady ||
		!slices.Equal(statuses, []Status{StatusAccepted, StatusReady}) || !slices.Equal(deltas, []int{-1, 1}) {
		t.Errorf("Take = %+v, %v, %v", history, statuses, deltas)
	}
	if h, s, d := c.Take(); h != nil || s != nil || d != nil {
		t.Errorf("a second Take = %v, %v, %v; want nothing", h, s, d)
	}
}

// TestListPages: a page read one past its limit has a next cursor, which
// reads back as the key of its last message; a cursor not made by it is
// refused.
func TestListPages(t *testing.T) {
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	var all []Listed
	for i := range 3 {
		all = append(all, ListedAt(&Message{ID: fmt.Sprint("m", i), Priority: 2, CreatedAt: at}, at.Add(time.Duration(i))))
	}
	var gotAfter *ListKey
	read := func(q ListQuery, after *ListKey) ([]Listed, error) {
		gotAfter = after
		return all[:min(q.Limit+1, len(all))], nil
	}
	msgs, next, err := ListPages(ListQuery{Limit: 2}, read)
	if err != nil || len(msgs) != 2 || next == "" || gotAfter != nil {
		t.Fatalf("first page: %d messages, next %q, %v", len(msgs), next, err)
	}
	if _, _, err := ListPages(ListQuery{Limit: 2, After: next}, read); err != nil || gotAfter == nil || gotAfter.Compare(all[1].Key) != 0 {
		t.Errorf("next page read after %+v, %v; want %+v", gotAfter, err, all[1].Key)
	}
	if msgs, next, err := ListPages(ListQuery{Limit: 5}, read); err != nil || len(msgs) != 3 || next != "" {
		t.Errorf("last page: %d messages, next %q, %v", len(msgs), next, err)
	}
	if _, _, err := ListPages(ListQuery{After: "not-a-cursor"}, read); !errors.Is(err, ErrBadCursor) {
		t.Errorf("a foreign cursor: %v", err)
	}
}
