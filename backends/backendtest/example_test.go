package backendtest_test

import (
	"path/filepath"
	"testing"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/bolt"
)

// A store proves it keeps the contract by running the suite from its own
// tests: Run calls open once per test, for a fresh, empty store that the
// test's cleanup closes. This is the embedded store's own; a new store
// writes the same, opening itself (a fresh database or table per test).
// The suite runs when `go test` runs the store's TestConformance.
func ExampleRun() {
	testConformance := func(t *testing.T) {
		backendtest.Run(t, func(t *testing.T) backends.Outbox {
			s, err := bolt.Open(filepath.Join(t.TempDir(), "outbox.db"), bolt.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	}
	_ = testConformance // in the store's package: func TestConformance(t *testing.T)
}
