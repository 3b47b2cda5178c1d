// Package eventstest holds the events the shipped plugins are tested with
// (testdata/events.json, one of each outcome whose details they must pass
// on), and checks that what a plugin passed on is an event whole.
package eventstest

import (
	_ "embed"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/genropy/postino/plugins/sdk"
)

//go:embed testdata/events.json
var events []byte

// Case is one event: as the relay hands it to a plugin, and the JSON the
// plugin must pass on.
type Case struct {
	Event sdk.Event
	JSON  json.RawMessage
}

// Cases returns the events.
func Cases(t testing.TB) []Case {
	t.Helper()
	var raw []json.RawMessage
	if err := json.Unmarshal(events, &raw); err != nil {
		t.Fatal(err)
	}
	cs := make([]Case, len(raw))
	for i, r := range raw {
		cs[i].JSON = r
		if err := json.Unmarshal(r, &cs[i].Event); err != nil {
			t.Fatal(err)
		}
	}
	return cs
}

// Check fails t unless got is c's JSON: the same fields with the same
// values, a field that sdk.Event does not carry included.
func Check(t testing.TB, what string, got []byte, c Case) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s is not JSON: %v\n%s", what, err, got)
	}
	json.Unmarshal(c.JSON, &w)
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s\n%s\nwant\n%s", what, got, c.JSON)
	}
}
