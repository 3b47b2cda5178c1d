package admin

import (
	"strconv"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

func TestRetryDue(t *testing.T) {
	at := time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)
	ahead, passed := at.Add(time.Hour), at.Add(-time.Minute)
	msg := func(st backends.Status, attempts int, sendAfter string) *backends.Message {
		m := &backends.Message{Status: st, Attempts: attempts, DueAt: ahead}
		if sendAfter != "" {
			m.Envelope.Control = map[string]string{backends.HeaderSendAfter: sendAfter}
		}
		return m
	}
	tests := []struct {
		name string
		m    *backends.Message
		now  bool
		want time.Time
	}{
		{"cancelled while scheduled", msg(backends.StatusFailed, 0, ahead.Format(time.RFC3339)), false, ahead},
		{"acknowledged", msg(backends.StatusFailedAcknowledged, 0, strconv.FormatInt(ahead.Unix(), 10)), false, ahead},
		{"with now", msg(backends.StatusFailed, 0, ahead.Format(time.RFC3339)), true, at},
		{"its time passed", msg(backends.StatusFailed, 0, passed.Format(time.RFC3339)), false, at},
		{"tried before", msg(backends.StatusFailed, 2, ahead.Format(time.RFC3339)), false, at},
		{"invalid, through intake again", msg(backends.StatusInvalid, 0, ahead.Format(time.RFC3339)), false, ahead},
		{"READY means now", msg(backends.StatusReady, 0, ahead.Format(time.RFC3339)), false, at},
		{"no send-after", msg(backends.StatusFailed, 0, ""), false, at},
		{"not a time", msg(backends.StatusFailed, 0, "tomorrow"), false, at},
	}
	for _, tt := range tests {
		if got := retryDue(tt.m, tt.now, at); !got.Equal(tt.want) {
			t.Errorf("%s: due %s, want %s", tt.name, got, tt.want)
		}
	}
}
