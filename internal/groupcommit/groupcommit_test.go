package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// gate is a commit function that records each group and, while held,
// blocks the committer inside a commit so that requests pile up behind it.
type gate struct {
	mu      sync.Mutex
	groups  [][]int
	entered chan struct{} // a commit started
	release chan struct{} // closed to let held commits finish
	fail    map[int]error
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 100), release: make(chan struct{})}
}

func (g *gate) commit(group []int) []error {
	g.entered <- struct{}{}
	<-g.release
	g.mu.Lock()
	defer g.mu.Unlock()
	g.groups = append(g.groups, slices.Clone(group))
	if g.fail == nil {
		return nil
	}
	errs := make([]error, len(group))
	for i, v := range group {
		errs[i] = g.fail[v]
	}
	return errs
}

func (g *gate) committed() [][]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.groups)
}

// pileUp holds the committer in a commit of request 0, then submits the
// others while it waits, and returns their pendings.
func pileUp(t *testing.T, c *Committer[int], g *gate, n int) (first *Pending, rest []*Pending) {
	t.Helper()
	first = c.Submit(context.Background(), 0)
	<-g.entered
	for i := 1; i <= n; i++ {
		rest = append(rest, c.Submit(context.Background(), i))
	}
	return first, rest
}

func TestGroups(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cfg     Config
		waiting int
		want    [][]int
	}{
		{"a lone request commits alone", Config{}, 0, [][]int{{0}}},
		{"requests waiting behind a commit share the next", Config{}, 5, [][]int{{0}, {1, 2, 3, 4, 5}}},
		{"max bounds a group", Config{Max: 2}, 5, [][]int{{0}, {1, 2}, {3, 4}, {5}}},
		// Under load a group waits for more, but never past full.
		{"a full group does not wait out its window", Config{Max: 3, Window: time.Hour}, 6, [][]int{{0}, {1, 2, 3}, {4, 5, 6}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newGate()
			c := New(tt.cfg, g.commit)
			defer c.Close()
			first, rest := pileUp(t, c, g, tt.waiting)
			close(g.release)
			for _, p := range append([]*Pending{first}, rest...) {
				if err := p.Wait(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if got := g.committed(); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("groups %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWindow(t *testing.T) {
	fixed := Config{Window: 3 * time.Millisecond}
	paced := Config{Window: 10 * time.Millisecond, Paced: true}
	for _, tt := range []struct {
		name string
		cfg  Config
		last int
		took time.Duration
		want time.Duration
	}{
		{"no window", Config{}, 5, time.Second, 0},
		{"a lone caller never waits", fixed, 1, time.Second, 0},
		{"under load a fixed window", fixed, 2, time.Second, 3 * time.Millisecond},
		{"paced: as long as the last commit", paced, 2, 4 * time.Millisecond, 4 * time.Millisecond},
		{"paced: never past the window", paced, 2, time.Second, 10 * time.Millisecond},
		{"paced: a lone caller never waits", paced, 1, time.Second, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.cfg.window(tt.last, tt.took); got != tt.want {
				t.Errorf("window(%d, %v) = %v, want %v", tt.last, tt.took, got, tt.want)
			}
		})
	}
}

// A paced group under load waits no longer than the previous commit took:
// with quick commits, an hour's window never holds a caller (unpaced, the
// last request waits out the hour, and the test's deadline fails it).
func TestPacedGroupWaitsOneCommit(t *testing.T) {
	g := newGate()
	c := New(Config{Window: time.Hour, Paced: true}, g.commit)
	defer c.Close()
	first, rest := pileUp(t, c, g, 2) // {0}, then {1, 2}: under load
	close(g.release)
	for _, p := range append([]*Pending{first}, rest...) {
		if err := p.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Do(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(g.committed()), fmt.Sprint([][]int{{0}, {1, 2}, {3}}); got != want {
		t.Errorf("groups %v, want %v", got, want)
	}
}

func TestEachRequestGetsItsOwnError(t *testing.T) {
	g := newGate()
	bad := errors.New("refused")
	g.fail = map[int]error{2: bad}
	c := New(Config{}, g.commit)
	defer c.Close()
	first, rest := pileUp(t, c, g, 3)
	close(g.release)
	if err := first.Wait(context.Background()); err != nil {
		t.Errorf("request 0: %v", err)
	}
	for i, p := range rest {
		err := p.Wait(context.Background())
		if want := g.fail[i+1]; !errors.Is(err, want) || (want == nil && err != nil) {
			t.Errorf("request %d: %v, want %v", i+1, err, want)
		}
	}
}

func TestContext(t *testing.T) {
	t.Run("withdrawn before a group takes it", func(t *testing.T) {
		g := newGate()
		c := New(Config{}, g.commit)
		defer c.Close()
		first, _ := pileUp(t, c, g, 0)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := c.Do(ctx, 1); !errors.Is(err, context.Canceled) {
			t.Errorf("Do with its context ended = %v, want context.Canceled", err)
		}
		// Queued, then withdrawn while the committer is busy.
		ctx2, cancel2 := context.WithCancel(context.Background())
		queued := c.Submit(ctx2, 3)
		cancel2()
		if err := queued.Wait(ctx2); !errors.Is(err, context.Canceled) {
			t.Errorf("Wait withdrawn before a group took it = %v, want context.Canceled", err)
		}
		after := c.Submit(context.Background(), 2)
		close(g.release)
		first.Wait(context.Background())
		after.Wait(context.Background())
		if got := g.committed(); fmt.Sprint(got) != "[[0] [2]]" {
			t.Errorf("groups %v: the withdrawn request 1 must not be committed", got)
		}
	})
	t.Run("awaited once taken", func(t *testing.T) {
		g := newGate()
		c := New(Config{}, g.commit)
		defer c.Close()
		ctx, cancel := context.WithCancel(context.Background())
		p := c.Submit(context.Background(), 0)
		<-g.entered // request 0 is in the commit now
		cancel()
		go close(g.release)
		if err := p.Wait(ctx); err != nil {
			t.Errorf("Wait after the commit took the request = %v, want its outcome (nil)", err)
		}
	})
}

func TestClose(t *testing.T) {
	g := newGate()
	c := New(Config{}, g.commit)
	first, rest := pileUp(t, c, g, 2)
	close(g.release)
	c.Close()
	for _, p := range append([]*Pending{first}, rest...) {
		if err := p.Wait(context.Background()); err != nil {
			t.Errorf("a request handed over before Close: %v", err)
		}
	}
	if got := g.committed(); fmt.Sprint(got) != "[[0] [1 2]]" {
		t.Errorf("groups %v, want every request handed over before Close committed", got)
	}
	if err := c.Do(context.Background(), 9); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close = %v, want ErrClosed", err)
	}
	c.Close() // a second Close is harmless
}
