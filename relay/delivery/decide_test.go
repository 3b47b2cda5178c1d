package delivery

import (
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/backoff"
	"github.com/genropy/postino/outcome"
)

func TestDecide(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	retry := Retry{Schedule: backoff.Schedule{First: time.Minute, Max: time.Hour}, MaxAge: time.Hour}
	const (
		shutdown = "handed back at shutdown; the attempt does not count"
		waited   = "handed back: it waited 3s for a session to billing, leaving less than half its lease (4s); the attempt does not count"
	)
	sent := outcome.Recipient{Address: "a@example.net", Status: outcome.RecipientSent,
		Code: 250, EnhancedCode: "2.0.0", Text: "queued", Host: "mx.example.net", At: now}
	refused := outcome.Recipient{Address: "c@example.net", Status: outcome.RecipientFailed, Verdict: outcome.VerdictHard,
		Code: 550, EnhancedCode: "5.1.1", Text: "no such user", Host: "mx.example.net", At: now}
	full := outcome.Recipient{Address: "b@example.net", Status: outcome.RecipientPending,
		Code: 452, EnhancedCode: "4.2.2", Text: "mailbox full", Host: "mx.example.net", At: now}
	noReply := outcome.Recipient{Address: "d@example.net", Status: outcome.RecipientPending,
		Text: "no reply: the session ended", Host: "mx.example.net", At: now}
	// Expired recipients are soft, whatever their last reply said: the
	// list of temporary replies says nothing of the address.
	expired := func(r outcome.Recipient) outcome.Recipient {
		r.Status, r.Verdict = outcome.RecipientFailed, outcome.VerdictSoft
		r.Text = "expired: not delivered within 1h0m0s; last: " + r.Text
		return r
	}
	results := func(rs ...outcome.Recipient) []outcome.Recipient { return rs }

	for _, tt := range []struct {
		name string
		end  attemptEnd
		want decision
	}{
		{
			name: "all sent",
			end:  attemptEnd{results: results(sent, sent), created: now.Add(-time.Minute), attempt: 1},
			want: decision{to: backends.StatusSent, reason: "delivered to 2 of 2 recipients via billing",
				addAttempt: true, results: results(sent, sent)},
		},
		{
			name: "some sent, some failed",
			end:  attemptEnd{results: results(sent, refused), created: now.Add(-time.Minute), attempt: 2},
			want: decision{to: backends.StatusSent, reason: "delivered to 1 of 2 recipients via billing",
				addAttempt: true, results: results(sent, refused)},
		},
		{
			name: "all failed",
			end:  attemptEnd{results: results(refused, refused), created: now.Add(-time.Minute), attempt: 1},
			want: decision{to: backends.StatusFailed,
				reason:     "no recipient accepted: c@example.net: 550 5.1.1 no such user (mx.example.net)",
				addAttempt: true, results: results(refused, refused)},
		},
		{
			name: "pending waits the schedule's delay",
			end:  attemptEnd{results: results(sent, full), created: now.Add(-10 * time.Minute), attempt: 3},
			want: decision{to: backends.StatusReady, dueAt: now.Add(4 * time.Minute),
				reason:     "deferred: b@example.net: 452 4.2.2 mailbox full (mx.example.net); next attempt at 2025-03-01T12:04:00Z",
				addAttempt: true, results: results(sent, full)},
		},
		{
			name: "pending without a reply",
			end:  attemptEnd{results: results(noReply, refused), created: now.Add(-10 * time.Minute), attempt: 1},
			want: decision{to: backends.StatusReady, dueAt: now.Add(time.Minute),
				reason:     "deferred: d@example.net: no reply: the session ended (mx.example.net); next attempt at 2025-03-01T12:01:00Z",
				addAttempt: true, results: results(noReply, refused)},
		},
		{
			name: "expired after some were sent",
			end:  attemptEnd{results: results(sent, full), created: now.Add(-2 * time.Hour), attempt: 9},
			want: decision{to: backends.StatusSent, reason: "expired: delivered to 1 of 2 recipients via billing",
				addAttempt: true, results: results(sent, expired(full))},
		},
		{
			name: "expired with none accepted, at max age exactly",
			end:  attemptEnd{results: results(full, refused), created: now.Add(-time.Hour), attempt: 9},
			want: decision{to: backends.StatusFailed,
				reason:     "expired: no recipient accepted: b@example.net: 452 4.2.2 expired: not delivered within 1h0m0s; last: mailbox full (mx.example.net)",
				addAttempt: true, results: results(expired(full), refused)},
		},
		{
			name: "handed back at shutdown",
			end: attemptEnd{results: results(full), created: now.Add(-time.Minute), attempt: 2,
				handedBack: shutdown},
			want: decision{to: backends.StatusReady, reason: shutdown, keepReason: true, dueAt: now,
				results: results(full)},
		},
		{
			name: "handed back after a long wait, past max age",
			end: attemptEnd{results: results(full), created: now.Add(-2 * time.Hour), attempt: 2,
				handedBack: waited, retryIn: 3 * time.Second},
			want: decision{to: backends.StatusReady, reason: waited, keepReason: true, dueAt: now.Add(3 * time.Second),
				results: results(full)},
		},
		{
			name: "waiting for its site, past max age",
			end: attemptEnd{results: results(full), created: now.Add(-2 * time.Hour), attempt: 2,
				handedBack: "handed back: site x is down", forSite: true, retryIn: 3 * time.Second},
			want: decision{to: backends.StatusFailed, addAttempt: true,
				reason:  "expired: no recipient accepted: b@example.net: 452 4.2.2 expired: not delivered within 1h0m0s; last: mailbox full (mx.example.net)",
				results: results(expired(full))},
		},
		{
			name: "handed back while another job ran",
			end: attemptEnd{results: results(sent, full), created: now.Add(-time.Minute), attempt: 1,
				handedBack: shutdown, ran: true},
			want: decision{to: backends.StatusReady, dueAt: now.Add(time.Minute),
				reason:     "deferred: b@example.net: 452 4.2.2 mailbox full (mx.example.net); next attempt at 2025-03-01T12:01:00Z",
				addAttempt: true, results: results(sent, full)},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.end.now, tt.end.route = now, "billing"
			given := slices.Clone(tt.end.results)
			got := decide(tt.end, retry)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("decide:\n got %+v\nwant %+v", got, tt.want)
			}
			if !reflect.DeepEqual(tt.end.results, given) {
				t.Errorf("decide changed the results it was given: %+v", tt.end.results)
			}
		})
	}
}
