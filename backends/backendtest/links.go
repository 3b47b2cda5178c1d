package backendtest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

var linkTests = []test[linkStore]{
	{"Links", testLinks},
}

func testLinks(t *testing.T, s linkStore) {
	ctx := context.Background()
	walk(t, s, "linked", backends.StatusSentAcknowledged)
	walk(t, s, "other", backends.StatusSentAcknowledged)
	if err := s.Link(ctx, "opec275.20261121@pec.example.it", "linked"); err != nil {
		t.Fatal(err)
	}
	if id, err := s.Linked(ctx, "opec275.20261121@pec.example.it"); err != nil || id != "linked" {
		t.Errorf("Linked: %q %v", id, err)
	}
	// A second receipt links the same key again: the first link stays.
	if err := s.Link(ctx, "opec275.20261121@pec.example.it", "linked"); err != nil {
		t.Errorf("the same link again: %v", err)
	}
	if err := s.Link(ctx, "opec275.20261121@pec.example.it", "other"); err != nil {
		t.Errorf("a key linked to another message: %v", err)
	}
	if id, _ := s.Linked(ctx, "opec275.20261121@pec.example.it"); id != "linked" {
		t.Errorf("the first link was replaced by %q", id)
	}
	if _, err := s.Linked(ctx, "nobody@pec.example.it"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("an unknown key: %v", err)
	}
	if err := s.Link(ctx, "k", "no-such-message"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("a link to no message: %v", err)
	}
	if err := s.Link(ctx, "", "linked"); err == nil {
		t.Error("an empty key was accepted")
	}
	if _, err := s.Purge(ctx, time.Now(), 100); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Linked(ctx, "opec275.20261121@pec.example.it"); !errors.Is(err, backends.ErrNotFound) {
		t.Errorf("a link outlived its purged message: %v", err)
	}
}
