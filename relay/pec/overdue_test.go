package pec

import (
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

func TestNextCheck(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	sent, accepted := now.Add(-20*time.Minute), now.Add(-10*time.Minute)
	l := Limits{Acceptance: 30 * time.Minute, Delivery: 24 * time.Hour}
	m := &backends.Message{Envelope: backends.Envelope{Recipients: []string{"anna@pec.dest.it", "bruno@pec.dest.it"}}}
	state := func(f func(*receipts)) *receipts {
		s := &receipts{sentAt: sent, certified: map[string]bool{}, external: map[string]bool{}, delivered: map[string]bool{}, settled: map[string]bool{}}
		f(s)
		return s
	}
	for _, tt := range []struct {
		name string
		s    *receipts
		want time.Time
	}{
		{"waiting for the acceptance", state(func(*receipts) {}), sent.Add(l.Acceptance)},
		{"acceptance said late: a look now and then", state(func(s *receipts) { s.acceptance = true }), now.Add(l.Acceptance)},
		{"not accepted: nothing more to wait for", state(func(s *receipts) { s.acceptance, s.refused = true, true }), time.Time{}},
		{"accepted, deliveries owed", state(func(s *receipts) { s.acceptance, s.acceptedAt = true, accepted }), accepted.Add(l.Delivery)},
		{"accepted, one delivered", state(func(s *receipts) {
			s.acceptance, s.acceptedAt = true, accepted
			s.settled["anna@pec.dest.it"] = true
		}), accepted.Add(l.Delivery)},
		{"every delivery settled (delivered, failed or said late)", state(func(s *receipts) {
			s.acceptance, s.acceptedAt = true, accepted
			s.settled["anna@pec.dest.it"], s.settled["bruno@pec.dest.it"] = true, true
		}), time.Time{}},
		{"ordinary recipients owe nothing", state(func(s *receipts) {
			s.acceptance, s.acceptedAt = true, accepted
			s.external["anna@pec.dest.it"], s.external["bruno@pec.dest.it"] = true, true
		}), time.Time{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := nextCheck(m, tt.s, l, now); !got.Equal(tt.want) {
				t.Errorf("nextCheck = %v, want %v", got, tt.want)
			}
		})
	}
}
