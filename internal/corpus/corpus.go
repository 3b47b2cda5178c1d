// Package corpus finds the shared corpora of real mail that the project's
// tests read: they live beside the repository, in ../shared/corpora, and
// are not part of the module.
package corpus

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Dir returns the folder of the corpus name. When it is missing the test is
// skipped, except in CI (CI=true), where it fails: CI must not pass by
// reading nothing.
func Dir(t testing.TB, name string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "corpora", name)
	if _, err := os.Stat(dir); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("corpus %s missing in CI: %v", name, err)
		}
		t.Skipf("corpus %s not found (%v): skipping", name, err)
	}
	return dir
}

// AddFiles adds every file that pattern matches (testdata/*.eml, say) to
// the seed corpus of a fuzz target.
func AddFiles(f *testing.F, pattern string) {
	f.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}
