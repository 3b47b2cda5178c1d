// Package corpus finds the corpora of real mail that the project's tests
// read. They are third-party mail, kept out of the repository: `make
// corpora` fetches them into the top-level testdata/ (its README says where
// each comes from), and a checkout beside a shared copy (../shared/corpora)
// reads that one.
package corpus

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Dir returns the folder of the corpus name: testdata/name, else
// ../shared/corpora/name. When neither is there the test is skipped, saying
// how to fetch it, except in CI (CI=true), where it fails: CI must not pass
// by reading nothing.
func Dir(t testing.TB, name string) string {
	t.Helper()
	dir, err := Find(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("corpus %s missing in CI: %v", name, err)
		}
		t.Skipf("corpus %s not found (%v): run `make corpora` to fetch it", name, err)
	}
	return dir
}

// Find returns the folder of the corpus name, as Dir does, or the error of
// the last place it looked.
func Find(name string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	var err error
	for _, dir := range []string{filepath.Join(root, "testdata", name), filepath.Join(root, "..", "shared", "corpora", name)} {
		if _, err = os.Stat(dir); err == nil {
			return dir, nil
		}
	}
	return "", err
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
