package sqlstore

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

func TestCommitGroup(t *testing.T) {
	bad := errors.New("bad write")
	lost := fmt.Errorf("reply lost: %w", backends.ErrOutcomeUnknown)
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

// TestListPages: a page read one past its limit has a next cursor, which
// reads back as the key of its last message; a cursor not made by it is
// refused.
func TestListPages(t *testing.T) {
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	var all []Listed
	for i := range 3 {
		all = append(all, ListedAt(&backends.Message{ID: fmt.Sprint("m", i), Priority: 2, CreatedAt: at}, at.Add(time.Duration(i))))
	}
	var gotAfter *ListKey
	read := func(q backends.ListQuery, after *ListKey) ([]Listed, error) {
		gotAfter = after
		return all[:min(q.Limit+1, len(all))], nil
	}
	msgs, next, err := ListPages(backends.ListQuery{Limit: 2}, read)
	if err != nil || len(msgs) != 2 || next == "" || gotAfter != nil {
		t.Fatalf("first page: %d messages, next %q, %v", len(msgs), next, err)
	}
	if _, _, err := ListPages(backends.ListQuery{Limit: 2, After: next}, read); err != nil || gotAfter == nil || gotAfter.Compare(all[1].Key) != 0 {
		t.Errorf("next page read after %+v, %v; want %+v", gotAfter, err, all[1].Key)
	}
	if msgs, next, err := ListPages(backends.ListQuery{Limit: 5}, read); err != nil || len(msgs) != 3 || next != "" {
		t.Errorf("last page: %d messages, next %q, %v", len(msgs), next, err)
	}
	if _, _, err := ListPages(backends.ListQuery{After: "not-a-cursor"}, read); !errors.Is(err, backends.ErrBadCursor) {
		t.Errorf("a foreign cursor: %v", err)
	}
}
