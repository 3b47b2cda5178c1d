package bolt_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/internal/testrig/outboxtest"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backends.Outbox { return outboxtest.Store(t) })
}

func TestLockedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "outbox.db")
	s, err := bolt.Open(path, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = bolt.Open(path, bolt.Options{LockTimeout: 50 * time.Millisecond})
	if err == nil {
		t.Fatal("a second Open of a locked file succeeded")
	}
	t.Log(err)
}

func BenchmarkStore(b *testing.B) {
	backendtest.Benchmark(b, func(b *testing.B) backends.Outbox { return outboxtest.Store(b) })
}
