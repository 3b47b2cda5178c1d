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

var messageTests = []test[messageStore]{
	{"CreateAndGet", testCreateAndGet},
	{"Duplicate", testDuplicate},
	{"ConcurrentDuplicates", testConcurrentDuplicates},
	{"NotFound", testNotFound},
	{"HistoryOrder", testHistoryOrder},
	{"ByMessageID", testByMessageID},
	{"ListPaging", testListPaging},
	{"Counts", testCounts},
}

func testCreateAndGet(t *testing.T, s messageStore) {
	want := newMessage("create-1")
	want.Batch = "campaign-1"
	want.Priority = backends.PriorityHigh
	want.DueAt = at(time.Hour)
	create(t, s, want)

	got := mustGet(t, s, "create-1")
	if got.Status != backends.StatusAccepted {
		t.Errorf("status = %s, want ACCEPTED", got.Status)
	}
	if got.Version < 0 || got.Attempts != 0 {
		t.Errorf("version %d attempts %d: want version >= 0 and no attempts", got.Version, got.Attempts)
	}
	checks := []struct {
		field     string
		got, want any
	}{
		{"MessageID", got.MessageID, want.MessageID},
		{"Priority", got.Priority, want.Priority},
		{"Batch", got.Batch, want.Batch},
		{"Reason", got.Reason, want.Reason},
		{"EmlPath", got.EmlPath, want.EmlPath},
		{"Sender", got.Envelope.Sender, want.Envelope.Sender},
		{"Recipients", fmt.Sprint(got.Envelope.Recipients), fmt.Sprint(want.Envelope.Recipients)},
		{"ClientAddr", got.Envelope.ClientAddr, want.Envelope.ClientAddr},
		{"Helo", got.Envelope.Helo, want.Envelope.Helo},
		{"AuthUser", got.Envelope.AuthUser, want.Envelope.AuthUser},
		{"Size", got.Envelope.Size, want.Envelope.Size},
		{"Control", fmt.Sprint(got.Envelope.Control), fmt.Sprint(want.Envelope.Control)},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
		}
	}
	for _, c := range []struct {
		field     string
		got, want time.Time
	}{
		{"CreatedAt", got.CreatedAt, base},
		{"DueAt", got.DueAt, at(time.Hour)},
		{"ReceivedAt", got.Envelope.ReceivedAt, base},
	} {
		if !c.got.Equal(c.want) {
			t.Errorf("%s = %v, want %v", c.field, c.got, c.want)
		}
	}
	h, err := s.History(context.Background(), "create-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 1 || h[0].Status != backends.StatusAccepted || h[0].Reason != want.Reason {
		t.Errorf("history after create = %+v, want one ACCEPTED row with the reason", h)
	}
}

func testDuplicate(t *testing.T, s messageStore) {
	create(t, s, newMessage("dup-1"))
	second := newMessage("dup-1")
	second.EmlPath = "spool/other.eml"
	err := s.Create(context.Background(), second)
	if !errors.Is(err, backends.ErrDuplicate) {
		t.Fatalf("second Create = %v, want ErrDuplicate", err)
	}
	if got := mustGet(t, s, "dup-1"); got.EmlPath != "spool/dup-1.eml" {
		t.Errorf("duplicate overwrote the row: eml path %s", got.EmlPath)
	}
}

func testConcurrentDuplicates(t *testing.T, s messageStore) {
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := newMessage("race-1")
			m.EmlPath = fmt.Sprintf("spool/race-%d.eml", i)
			errs[i] = s.Create(context.Background(), m)
		}()
	}
	wg.Wait()
	created := 0
	for _, err := range errs {
		switch {
		case err == nil:
			created++
		case !errors.Is(err, backends.ErrDuplicate):
			t.Errorf("Create: %v", err)
		}
	}
	if created != 1 {
		t.Errorf("%d concurrent Creates of one id succeeded, want exactly 1", created)
	}
	h, err := s.History(context.Background(), "race-1")
	if err != nil || len(h) != 1 {
		t.Errorf("history = %v, %v: want one row", h, err)
	}
}

func testNotFound(t *testing.T, s messageStore) {
	ctx := context.Background()
	if _, err := s.Get(ctx, "missing"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("Get = %v, want ErrNotFound", err)
	}
	if _, err := s.History(ctx, "missing"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("History = %v, want ErrNotFound", err)
	}
	err := s.Transition(ctx, backends.Transition{ID: "missing", From: backends.StatusAccepted, To: backends.StatusInvalid})
	if !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("Transition = %v, want ErrNotFound", err)
	}
}

func testHistoryOrder(t *testing.T, s messageStore) {
	walk(t, s, "hist-1", backends.StatusFailedAcknowledged)
	h, err := s.History(context.Background(), "hist-1")
	if err != nil {
		t.Fatal(err)
	}
	var got []backends.Status
	for _, e := range h {
		got = append(got, e.Status)
	}
	if want := path(backends.StatusFailedAcknowledged); !slices.Equal(got, want) {
		t.Errorf("history %v, want %v", got, want)
	}
	for i := 1; i < len(h); i++ {
		if h[i].At.Before(h[i-1].At) {
			t.Errorf("history row %d at %v is before row %d at %v", i, h[i].At, i-1, h[i-1].At)
		}
	}
}

func testByMessageID(t *testing.T, s messageStore) {
	ctx := context.Background()
	a := newMessage("mid-a")
	a.MessageID = "shared@example.com"
	a.CreatedAt = at(time.Second)
	b := newMessage("mid-b")
	b.MessageID = "shared@example.com"
	create(t, s, a)
	create(t, s, b)
	create(t, s, newMessage("mid-c"))
	ms, err := s.ByMessageID(ctx, "shared@example.com")
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].ID != "mid-b" || ms[1].ID != "mid-a" {
		t.Errorf("ByMessageID = %v, want [mid-b mid-a]", ids(ms))
	}
	if ms, _ := s.ByMessageID(ctx, "nobody@example.com"); len(ms) != 0 {
		t.Errorf("ByMessageID of an unknown id = %v", ids(ms))
	}
}

func ids(ms []*backends.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func testListPaging(t *testing.T, s messageStore) {
	ctx := context.Background()
	for i := range 7 {
		m := newMessage(fmt.Sprintf("list-%d", i))
		m.CreatedAt = at(time.Duration(i) * time.Second)
		create(t, s, m)
	}
	move(t, s, "list-3", backends.StatusAccepted, backends.StatusInvalid, at(time.Minute))

	collect := func(q backends.ListQuery) []string {
		var out []string
		for range 10 {
			page, next, err := s.List(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if len(page) > q.Limit {
				t.Fatalf("page of %d for limit %d", len(page), q.Limit)
			}
			out = append(out, ids(page)...)
			if next == "" {
				return out
			}
			q.After = next
		}
		t.Fatal("listing never ended")
		return nil
	}
	got := collect(backends.ListQuery{Limit: 3})
	if want := []string{"list-6", "list-5", "list-4", "list-3", "list-2", "list-1", "list-0"}; !slices.Equal(got, want) {
		t.Errorf("all, newest first: %v, want %v", got, want)
	}
	got = collect(backends.ListQuery{Status: backends.StatusAccepted, Limit: 2})
	if want := []string{"list-0", "list-1", "list-2", "list-4", "list-5", "list-6"}; !slices.Equal(got, want) {
		t.Errorf("ACCEPTED: %v, want %v", got, want)
	}
	got = collect(backends.ListQuery{Status: backends.StatusInvalid, Limit: 2})
	if !slices.Equal(got, []string{"list-3"}) {
		t.Errorf("INVALID: %v", got)
	}
}

func testCounts(t *testing.T, s messageStore) {
	ctx := context.Background()
	walk(t, s, "count-1", backends.StatusReady)
	walk(t, s, "count-2", backends.StatusReady)
	walk(t, s, "count-3", backends.StatusInvalid)
	create(t, s, newMessage("count-4"))
	n, err := s.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[backends.Status]int{backends.StatusReady: 2, backends.StatusInvalid: 1, backends.StatusAccepted: 1}
	for _, st := range backends.Statuses() {
		if n[st] != want[st] {
			t.Errorf("count of %s = %d, want %d", st, n[st], want[st])
		}
	}
}
