package backendtest

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/genropy/postino/backends/internal/sqlstore"
)

// The plans of a SQL store's hot statements (its TestPlans): each is
// explained on a filled outbox, its plan read and checked against what it
// must be, and, with the store's -plans flag, written to its PLANS.md.
// What an EXPLAIN says differs from a server to another; the rest is here.

// PlanCase is a hot statement and what its plan must be: W is what a
// store wants of the access through each index, in its own terms (the
// columns it must use).
type PlanCase[W any] struct {
	Name string
	Stmt sqlstore.Stmt
	// Use names the index of every table access, as the store's
	// PlanAccess.Key does, with what it wants of it.
	Use map[string]W
	// MaxRows bounds the rows the statement reads, over every access; 0
	// for a statement only explained, not run.
	MaxRows int
	// Scan allows a full scan: of a table of a few rows.
	Scan bool
}

// PlanAccess is one table access of a plan.
type PlanAccess interface {
	// Key names the index the access reads through, or the table it
	// scans.
	Key() string
	// Read is how many rows it read, over its loops.
	Read() float64
	// Row is its line of the plan's table in PLANS.md.
	Row() string
}

// Plans explains and checks the cases of a SQL store.
type Plans[W any, A PlanAccess] struct {
	Cases []PlanCase[W]
	// Explain returns the plan of c, in JSON.
	Explain func(c PlanCase[W]) ([]byte, error)
	// Access reads a node of a plan: a table access, when it is one (ok),
	// and whether the node sorts.
	Access func(node map[string]any) (a A, ok, sorts bool)
	// Check checks a, an access of c, against want, beyond its index and
	// the rows it read.
	Check func(t *testing.T, c PlanCase[W], a A, want W)
	// Header starts PLANS.md; TableHead, each case's table of accesses.
	Header, TableHead string
}

// Run explains each case, fails on a plan that sorts, reads an index not
// named or leaves one unused, reads more rows than MaxRows or fails
// Check, and with write writes PLANS.md. PLANS_DEBUG=<case name> logs
// that case's plan.
func (p Plans[W, A]) Run(t *testing.T, write bool) {
	var doc strings.Builder
	for _, c := range p.Cases {
		js, err := p.Explain(c)
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		accesses := p.check(t, c, js)
		if os.Getenv("PLANS_DEBUG") == c.Name {
			t.Log(string(js))
		}
		fmt.Fprintf(&doc, "## %s\n\n```sql\n%s\n```\n\n%s", c.Name, strings.Join(strings.Fields(c.Stmt.Query), " "), p.TableHead)
		for _, a := range accesses {
			doc.WriteString(a.Row() + "\n")
		}
		doc.WriteString("\n")
	}
	if write {
		if err := os.WriteFile("PLANS.md", []byte(p.Header+doc.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// check reads the plan js of c and checks it; it returns its accesses.
func (p Plans[W, A]) check(t *testing.T, c PlanCase[W], js []byte) []A {
	t.Helper()
	var tree any
	if err := json.Unmarshal(js, &tree); err != nil {
		t.Fatal(err)
	}
	var accesses []A
	sorted := false
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			a, ok, sorts := p.Access(v)
			sorted = sorted || sorts
			if ok {
				accesses = append(accesses, a)
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(tree)
	if len(accesses) == 0 {
		t.Errorf("%s: no table access in the plan", c.Name)
	}
	if sorted {
		t.Errorf("%s: the plan sorts", c.Name)
	}
	read := 0.0
	used := map[string]bool{}
	for _, a := range accesses {
		want, ok := c.Use[a.Key()]
		if !ok {
			t.Errorf("%s: read through %q, want one of %v", c.Name, a.Key(), c.Use)
		}
		used[a.Key()] = true
		p.Check(t, c, a, want)
		read += a.Read()
	}
	for k := range c.Use {
		if !used[k] {
			t.Errorf("%s: %s unused", c.Name, k)
		}
	}
	if c.MaxRows > 0 && read > float64(c.MaxRows) {
		t.Errorf("%s: read %.0f rows, want at most %d", c.Name, read, c.MaxRows)
	}
	return accesses
}
