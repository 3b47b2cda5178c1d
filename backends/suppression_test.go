package backends

import (
	"testing"
	"time"
)

func TestSuppressionKey(t *testing.T) {
	tests := []struct {
		in, want string
		bad      bool
	}{
		{in: "Jane.Doe@Example.COM", want: "Jane.Doe@example.com"},
		{in: " <user@EXAMPLE.net> ", want: "user@example.net"},
		{in: `"odd@name"@Example.org`, want: `"odd@name"@example.org`},
		{in: "Jürgen@Bücher.DE", want: "Jürgen@bücher.de"},
		{in: "nodomain", bad: true},
		{in: "@example.com", bad: true},
		{in: "user@", bad: true},
		{in: "us er@example.com", bad: true},
		{in: "user@exa\x00mple.com", bad: true},
		{in: "", bad: true},
	}
	for _, tc := range tests {
		got, err := SuppressionKey(tc.in)
		if tc.bad != (err != nil) || got != tc.want {
			t.Errorf("SuppressionKey(%q) = %q, %v", tc.in, got, err)
		}
	}
}

func TestSuppressionChangeApply(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	change := func(d time.Duration, need int) SuppressionChange {
		return SuppressionChange{Entry: Suppression{Key: "a@b.c", Scope: ScopeAll, Reason: ReasonHardBounce, Created: t0.Add(d), MessageID: d.String()},
			By: "relay", Need: need, Within: 24 * time.Hour}
	}
	active := Suppression{Key: "a@b.c", Scope: ScopeAll, Active: true, Strikes: 1, FirstStrike: t0, Created: t0, MessageID: "first"}
	expired := active
	expired.Expires = t0.Add(time.Hour)
	pending := Suppression{Key: "a@b.c", Scope: ScopeAll, Strikes: 1, FirstStrike: t0}
	fromReport := pending
	fromReport.ReportID = "r1"
	reported := func(d time.Duration) SuppressionChange {
		c := change(d, 2)
		c.Entry.ReportID = "r1"
		return c
	}
	tests := []struct {
		name        string
		cur         *Suppression
		c           SuppressionChange
		changed     bool
		active      bool
		strikes     int
		firstStrike time.Time
	}{
		{"new, at once", nil, change(0, 0), true, true, 1, t0},
		{"new, needs two", nil, change(0, 2), true, false, 1, t0},
		{"second within the window", &pending, change(time.Hour, 2), true, true, 2, t0},
		{"second past the window", &pending, change(25*time.Hour, 2), true, false, 1, t0.Add(25 * time.Hour)},
		{"active stays", &active, change(time.Hour, 0), false, true, 1, t0},
		{"expired is made again", &expired, change(2*time.Hour, 0), true, true, 1, t0.Add(2 * time.Hour)},
		{"the same report again", &fromReport, reported(time.Hour), false, false, 1, t0},
		{"another report", &fromReport, func() SuppressionChange { c := reported(time.Hour); c.Entry.ReportID = "r2"; return c }(), true, true, 2, t0},
	}
	for _, tc := range tests {
		next, changed := tc.c.Apply(tc.cur)
		if changed != tc.changed || next.Active != tc.active || next.Strikes != tc.strikes || !next.FirstStrike.Equal(tc.firstStrike) {
			t.Errorf("%s: %+v changed=%v", tc.name, next, changed)
		}
		if changed && (next.ChangedBy != "relay" || !next.Changed.Equal(tc.c.Entry.Created)) {
			t.Errorf("%s: the change's author and time: %+v", tc.name, next)
		}
	}
}

func TestSuppressionQueryPageSize(t *testing.T) {
	for _, c := range []struct{ limit, want int }{{0, DefaultPageSize}, {-3, DefaultPageSize}, {1, 1}, {500, 500}} {
		if got := (SuppressionQuery{Limit: c.limit}).PageSize(); got != c.want {
			t.Errorf("PageSize of limit %d = %d, want %d", c.limit, got, c.want)
		}
	}
}
