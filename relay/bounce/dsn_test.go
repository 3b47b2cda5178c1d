package bounce

import (
	"slices"
	"strings"
	"testing"
)

// TestReadDSN checks how a delivery-status body is split into recipients
// when the report does not keep to RFC 3464's layout.
func TestReadDSN(t *testing.T) {
	tests := []struct {
		name, in   string
		message    string   // per-message fields, "name=value" joined by "|"
		recipients []string // one string per recipient, as message
	}{
		{
			name: "as RFC 3464 writes it",
			in: "Reporting-MTA: dns; mx.example\n\n" +
				"Final-Recipient: rfc822; a@example.com\nAction: failed\nStatus: 5.1.1\n\n" +
				"Final-Recipient: rfc822; b@example.com\nAction: delayed\nStatus: 4.2.2\n",
			message:    "Reporting-MTA=dns; mx.example",
			recipients: []string{"Final-Recipient=rfc822; a@example.com|Action=failed|Status=5.1.1", "Final-Recipient=rfc822; b@example.com|Action=delayed|Status=4.2.2"},
		},
		{
			name:       "recipients without a blank line between",
			in:         "Final-Recipient: rfc822; a@example.com\nStatus: 5.1.1\nFinal-Recipient: rfc822; b@example.com\nStatus: 5.2.2\n",
			recipients: []string{"Final-Recipient=rfc822; a@example.com|Status=5.1.1", "Final-Recipient=rfc822; b@example.com|Status=5.2.2"},
		},
		{
			// Fields before the first Final-Recipient wait for it.
			name:       "Action before Final-Recipient",
			in:         "Action: failed\nStatus: 5.1.1\nFinal-Recipient: rfc822; a@example.com\n",
			recipients: []string{"Action=failed|Status=5.1.1|Final-Recipient=rfc822; a@example.com"},
		},
		{
			// An Original-Recipient before its Final-Recipient opens the
			// recipient; the Final-Recipient joins it.
			name:       "Original-Recipient first",
			in:         "Original-Recipient: rfc822; o@example.com\nFinal-Recipient: rfc822; a@example.com\nStatus: 5.1.1\nOriginal-Recipient: rfc822; p@example.com\nFinal-Recipient: rfc822; b@example.com\n",
			recipients: []string{"Original-Recipient=rfc822; o@example.com|Final-Recipient=rfc822; a@example.com|Status=5.1.1", "Original-Recipient=rfc822; p@example.com|Final-Recipient=rfc822; b@example.com"},
		},
		{
			// Without a Status the open recipient may still take its
			// Original-Recipient after the Final-Recipient.
			name:       "Original-Recipient after Final-Recipient",
			in:         "Final-Recipient: rfc822; a@example.com\nOriginal-Recipient: rfc822; o@example.com\nStatus: 5.1.1\n",
			recipients: []string{"Final-Recipient=rfc822; a@example.com|Original-Recipient=rfc822; o@example.com|Status=5.1.1"},
		},
		{
			// X-Actual-Recipient belongs to the open recipient, and opens
			// one only when none is.
			name:       "X-Actual-Recipient",
			in:         "Final-Recipient: rfc822; a@example.com\nX-Actual-Recipient: rfc822; a2@example.com\n\nX-Actual-Recipient: rfc822; b@example.com\nStatus: 5.0.0\n",
			recipients: []string{"Final-Recipient=rfc822; a@example.com|X-Actual-Recipient=rfc822; a2@example.com", "X-Actual-Recipient=rfc822; b@example.com|Status=5.0.0"},
		},
		{
			// Per-message fields are per-message wherever they stand, and
			// fields no recipient follows in their group are dropped.
			name:       "per-message fields among recipients",
			in:         "Final-Recipient: rfc822; a@example.com\nArrival-Date: Tue, 4 Mar 2025 09:15:01 +0000\nStatus: 5.1.1\n\nAction: failed\n",
			message:    "Arrival-Date=Tue, 4 Mar 2025 09:15:01 +0000",
			recipients: []string{"Final-Recipient=rfc822; a@example.com|Status=5.1.1"},
		},
	}
	join := func(fs fields) string {
		var s []string
		for _, f := range fs {
			s = append(s, f.name+"="+f.value)
		}
		return strings.Join(s, "|")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := readDSN(tt.in)
			if got := join(d.message); got != tt.message {
				t.Errorf("message = %q, want %q", got, tt.message)
			}
			var got []string
			for _, r := range d.recipients {
				got = append(got, join(r))
			}
			if !slices.Equal(got, tt.recipients) {
				t.Errorf("recipients =\n%q\nwant\n%q", got, tt.recipients)
			}
		})
	}
}
