package suppression

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/outcome"
)

func openStore(t *testing.T) *bolt.Store {
	t.Helper()
	s, err := bolt.Open(filepath.Join(t.TempDir(), "outbox.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newPolicy(t *testing.T) (*Policy, *bolt.Store) {
	s := openStore(t)
	p := New(Config{
		Streams: map[string]Stream{
			"news":   {Bulk: true, Mode: ModeRecord},
			"alerts": {Mode: ModeRefuse, Blocks: []backends.SuppressionReason{backends.ReasonManual}},
		},
		RouteStreams: map[string]string{"marketing": "news", "default": "alerts"},
		HardBounce:   Rule{Need: 2, Within: 24 * time.Hour},
		Complaint:    Rule{Need: 1},
		By:           "relay test",
		Choose: func(m *backends.Message) (string, error) {
			if m.Envelope.Sender == "news@example.com" {
				return "marketing", nil
			}
			return "default", nil
		},
	}, s)
	return p, s
}

func TestStreamOf(t *testing.T) {
	p, _ := newPolicy(t)
	msg := func(header, route, sender string) *backends.Message {
		m := &backends.Message{Route: route, Envelope: backends.Envelope{Sender: sender}}
		if header != "" {
			m.Envelope.Control = map[string]string{HeaderStream: header}
		}
		return m
	}
	tests := []struct {
		m     *backends.Message
		route string
		want  string
	}{
		{msg("news", "default", ""), "", "news"},
		{msg("", "marketing", ""), "", "news"},
		{msg("", "", ""), "marketing", "news"},
		{msg("", "", "news@example.com"), "", "news"},
		{msg("", "other", ""), "", Transactional},
		{msg("", "default", ""), "", "alerts"},
	}
	for i, tc := range tests {
		if got := p.StreamOf(tc.m, tc.route); got != tc.want {
			t.Errorf("%d: StreamOf = %q, want %q", i, got, tc.want)
		}
	}
}

func TestHold(t *testing.T) {
	p, _ := newPolicy(t)
	ctx := context.Background()
	now := time.Now().UTC()
	if _, err := p.Unsubscribe(ctx, "news", "reader@example.net", Evidence{MessageID: "m1"}, now); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Complaint(ctx, "alerts", "angry@example.net", Evidence{MessageID: "m2"}, now); err != nil {
		t.Fatal(err)
	}
	results := []outcome.Recipient{
		{Address: "reader@EXAMPLE.net", Status: outcome.RecipientPending},
		{Address: "angry@example.net", Status: outcome.RecipientPending},
		{Address: "fine@example.net", Status: outcome.RecipientPending},
		{Address: "reader@example.net", Status: outcome.RecipientSent},
	}
	got, n, err := p.Hold(ctx, "news", results, now)
	if err != nil || n != 1 || got[0].Status != outcome.RecipientSuppressed || got[1].Status != outcome.RecipientPending ||
		got[3].Status != outcome.RecipientSent || results[0].Status != outcome.RecipientPending {
		t.Fatalf("news: %d held, %+v, %v", n, got, err)
	}
	if got[0].Text == "" || got[0].Verdict != "" {
		t.Errorf("a held recipient says why, with no verdict: %+v", got[0])
	}
	// The transactional stream is not held back by news's unsubscribe.
	if _, n, _ := p.Hold(ctx, Transactional, results, now); n != 0 {
		t.Errorf("transactional: %d held, want 0", n)
	}
	// alerts blocks only manual entries (and hard bounces): its complaint does not.
	if _, n, _ := p.Hold(ctx, "alerts", results, now); n != 0 {
		t.Errorf("alerts: %d held; its blocks leave complaints out", n)
	}
}

func TestHardRule(t *testing.T) {
	p, _ := newPolicy(t)
	ctx := context.Background()
	now := time.Now().UTC()
	results := []outcome.Recipient{{Address: "gone@example.org", Status: outcome.RecipientPending}}
	if e, err := p.Hard(ctx, "gone@example.org", Evidence{MessageID: "m1", Code: "550 5.1.1"}, now); err != nil || e.Active {
		t.Fatalf("first of two: %+v %v", e, err)
	}
	if _, n, _ := p.Hold(ctx, Transactional, results, now); n != 0 {
		t.Error("held after one hard verdict of two")
	}
	if e, err := p.Hard(ctx, "gone@example.org", Evidence{MessageID: "m2"}, now.Add(time.Hour)); err != nil || !e.Active || e.Scope != backends.ScopeAll {
		t.Fatalf("second: %+v %v", e, err)
	}
	// A hard verdict holds back every stream, whatever its blocks.
	for _, stream := range []string{Transactional, "news", "alerts"} {
		if _, n, _ := p.Hold(ctx, stream, results, now.Add(2*time.Hour)); n != 1 {
			t.Errorf("%s: not held after two hard verdicts", stream)
		}
	}
}

func TestRefused(t *testing.T) {
	p, _ := newPolicy(t)
	ctx := context.Background()
	now := time.Now().UTC()
	c := backends.SuppressionChange{Entry: backends.Suppression{Address: "blocked@example.com", Reason: backends.ReasonManual, Created: now}, By: "operator"}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.store.Suppress(ctx, c); err != nil {
		t.Fatal(err)
	}
	app := &backends.Message{Envelope: backends.Envelope{Sender: "app@example.com"}}
	news := &backends.Message{Envelope: backends.Envelope{Sender: "news@example.com"}}
	if e, err := p.Refused(ctx, app, "blocked@example.com", now); err != nil || e == nil {
		t.Errorf("alerts refuses: %v %v", e, err)
	}
	if e, _ := p.Refused(ctx, app, "other@example.com", now); e != nil {
		t.Errorf("refused an address not on the list: %+v", e)
	}
	if e, _ := p.Refused(ctx, news, "blocked@example.com", now); e != nil {
		t.Errorf("news records, it does not refuse: %+v", e)
	}
	// An entry of the route's stream alone does not refuse: the header,
	// read later, may name another stream.
	if _, err := p.Complaint(ctx, "alerts", "angry@example.com", Evidence{}, now); err != nil {
		t.Fatal(err)
	}
	if e, err := p.Refused(ctx, app, "angry@example.com", now); err != nil || e != nil {
		t.Errorf("refused at RCPT for an entry of one stream: %+v %v", e, err)
	}
}
