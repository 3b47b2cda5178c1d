package spool_test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/genropy/postino/spool"
)

func openSpool(t testing.TB) *spool.Spool {
	t.Helper()
	s, err := spool.Open(filepath.Join(t.TempDir(), "spool"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func write(t testing.TB, s *spool.Spool, id string, at time.Time, body []byte) string {
	t.Helper()
	f, err := s.Create(id, at)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := f.Commit(); err != nil {
		t.Fatal(err)
	}
	return f.Path()
}

// contents reads, whole, what an open returned, and closes it.
func contents(t *testing.T, r io.ReadCloser, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestCommitOpenRemove(t *testing.T) {
	s := openSpool(t)
	at := time.Date(2026, 11, 21, 22, 10, 5, 0, time.UTC)
	path := write(t, s, "msg.1-a_b", at, []byte("Subject: hi\r\n\r\nbody\r\n"))
	if dir := filepath.Dir(path); dir != filepath.Join("20261121", "2210") {
		t.Errorf("bucket %s, want 20261121/2210", dir)
	}
	if id, ok := spool.IDOf(path); !ok || id != "msg.1-a_b" {
		t.Errorf("IDOf(%s) = %q, %v", path, id, ok)
	}
	f, err := s.Open(path)
	if got := contents(t, f, err); got != "Subject: hi\r\n\r\nbody\r\n" {
		t.Errorf("read back %q", got)
	}
	if ok, err := s.Exists(path); !ok || err != nil {
		t.Errorf("Exists = %v, %v", ok, err)
	}
	if err := s.Remove(path); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Exists(path); ok {
		t.Error("file still there after Remove")
	}
	if err := s.Remove(path); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

func TestSameIDTwice(t *testing.T) {
	s := openSpool(t)
	now := time.Now()
	a := write(t, s, "same", now, []byte("a"))
	b := write(t, s, "same", now, []byte("b"))
	if a == b {
		t.Fatalf("two submissions of one id share the file %s", a)
	}
}

func TestAbortLeavesNothing(t *testing.T) {
	s := openSpool(t)
	f, err := s.Create("aborted", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	f.Write(bytes.Repeat([]byte("x"), 100<<10))
	f.Abort()
	n := 0
	s.Walk(func(spool.Entry) error { n++; return nil })
	if n != 0 {
		t.Errorf("%d files left after Abort", n)
	}
}

func TestWalk(t *testing.T) {
	s := openSpool(t)
	want := map[string]string{}
	for i := range 5 {
		id := fmt.Sprintf("walk-%d", i)
		want[write(t, s, id, time.Now().Add(time.Duration(i)*time.Minute), []byte(id))] = id
	}
	// Files that are not the spool's own are left alone.
	os.WriteFile(filepath.Join(s.Dir(), "README"), []byte("x"), 0o644)
	got := map[string]string{}
	if err := s.Walk(func(e spool.Entry) error { got[e.Path] = e.ID; return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Walk found %v, want %v", got, want)
	}
}

func TestPathsStayInside(t *testing.T) {
	s := openSpool(t)
	for _, p := range []string{"../outbox.db", "a/../../x.eml"} {
		if _, err := s.Open(p); err == nil {
			t.Errorf("Open(%q) succeeded", p)
		}
		if err := s.Remove(p); err == nil {
			t.Errorf("Remove(%q) succeeded", p)
		}
	}
}

func TestIDOf(t *testing.T) {
	tests := []struct {
		path string
		id   string
		ok   bool
	}{
		{"20261121/2210/abc.0123456789ab.eml", "abc", true},
		{"20261121/2210/a.b.c.0123456789ab.eml", "a.b.c", true},
		{"20261121/2210/abc.eml", "", false},
		{"20261121/2210/abc.0123456789ab.tmp", "", false},
		{"README", "", false},
	}
	for _, tt := range tests {
		id, ok := spool.IDOf(tt.path)
		if id != tt.id || ok != tt.ok {
			t.Errorf("IDOf(%q) = %q, %v; want %q, %v", tt.path, id, ok, tt.id, tt.ok)
		}
	}
}

func TestPruneBuckets(t *testing.T) {
	s := openSpool(t)
	old := time.Now().Add(-48 * time.Hour)
	p := write(t, s, "old", old, []byte("x"))
	s.Remove(p)
	kept := write(t, s, "kept", old.Add(time.Minute), []byte("x"))
	if err := s.PruneBuckets(time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), filepath.Dir(p))); !os.IsNotExist(err) {
		t.Errorf("empty old bucket still there: %v", err)
	}
	if ok, _ := s.Exists(kept); !ok {
		t.Error("a bucket with a message was pruned")
	}
	// The pruned bucket can be used again.
	write(t, s, "again", old, []byte("x"))
}

func TestConcurrentCommits(t *testing.T) {
	s := openSpool(t)
	var wg sync.WaitGroup
	paths := make([]string, 200)
	for i := range paths {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i] = write(t, s, fmt.Sprintf("c-%d", i), time.Now(), []byte(fmt.Sprint(i)))
		}()
	}
	wg.Wait()
	for i, p := range paths {
		f, err := s.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(f)
		f.Close()
		if string(b) != fmt.Sprint(i) {
			t.Errorf("%s holds %q, want %d", p, b, i)
		}
	}
}

// BenchmarkCommit writes 4 KiB messages from parallel writers, each durable
// before Commit returns: the figure is the spool's share of accept speed.
func BenchmarkCommit(b *testing.B) {
	s := openSpool(b)
	body := bytes.Repeat([]byte("0123456789abcdef"), 290)
	b.SetParallelism(10) // 20 writers on 2 cores, as smtp-source -s 20
	b.SetBytes(int64(len(body)))
	var n sync.Mutex
	i := 0
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Lock()
			i++
			id := fmt.Sprintf("bench-%d", i)
			n.Unlock()
			f, err := s.Create(id, time.Now())
			if err != nil {
				b.Fatal(err)
			}
			f.Write(body)
			if err := f.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
