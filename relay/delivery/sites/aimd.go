package sites

import (
	"math"
	"time"
)

// Share is a site's share of its limits under AIMD, from the floor to 1.
// The zero Share is a full one.
type Share struct {
	cut  float64 // 1 - share, so that the zero value is a full share
	last time.Time
}

// Of is the share, from the floor to 1.
func (s Share) Of() float64 { return 1 - s.cut }

// Throttle shrinks the share on a throttling signal at now, unless it
// shrank within the cooldown (the same burst of refusals). It reports
// whether it shrank.
func (a Adapt) Throttle(s *Share, now time.Time) bool {
	if !s.last.IsZero() && now.Sub(s.last) < a.Cooldown {
		return false
	}
	s.last = now
	s.cut = 1 - math.Max(a.Floor, s.Of()*a.Decrease)
	return true
}

// Success grows the share for a message the site accepted.
func (a Adapt) Success(s *Share) {
	s.cut = math.Max(0, s.cut-a.Increase)
}

// Sessions is the sessions at once a share of limit allows: one at least.
// A limit of 0 (none) stays none.
func (s Share) Sessions(limit int) int {
	if limit == 0 {
		return 0
	}
	return max(1, int(math.Floor(s.Of()*float64(limit)+1e-9)))
}

// Rate is the rate a share of limit allows; 0 (none) stays none.
func (s Share) Rate(limit float64) float64 { return s.Of() * limit }
