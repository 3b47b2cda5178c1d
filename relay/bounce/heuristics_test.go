package bounce

import (
	"slices"
	"strings"
	"testing"
)

// TestReadBounceText checks how the text of a bounce is split into its
// explanation and a block per failed recipient.
func TestReadBounceText(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		preamble []string
		blocks   []textBlock
	}{
		{
			name:     "address leading its line",
			text:     "This is the mail system.\n\n<a@example.com>: host mx.example.com said: 550 5.1.1 user unknown\n",
			preamble: []string{"This is the mail system.", ""},
			blocks:   []textBlock{{"a@example.com", []string{"host mx.example.com said: 550 5.1.1 user unknown", ""}}},
		},
		{
			// A recipient named again gets one block, in the order first
			// named.
			name:     "recipient named twice",
			text:     "Delivery failed.\na@example.com\n  550 user unknown\nb@example.com\n  552 mailbox full\nA@Example.com\n  again",
			preamble: []string{"Delivery failed."},
			blocks: []textBlock{
				{"a@example.com", []string{"  550 user unknown", "  again"}},
				{"b@example.com", []string{"  552 mailbox full"}},
			},
		},
		{
			// A phrase names a recipient only when no line lists one.
			name:     "phrase only",
			text:     "Your message to c@example.com couldn't be delivered.\nThe mailbox is full.",
			preamble: nil,
			blocks:   []textBlock{{"c@example.com", []string{"couldn't be delivered.", "The mailbox is full."}}},
		},
		{
			name:     "phrase and a listed recipient",
			text:     "Your message to c@example.com couldn't be delivered.\nFailed recipient: d@example.com\n550 no such user",
			preamble: []string{"Your message to c@example.com couldn't be delivered."},
			blocks:   []textBlock{{"d@example.com", []string{"Failed recipient", "550 no such user"}}},
		},
		{
			// The address after a line ending in "sent by" is the
			// sender's; so are the sender of the quoted original and the
			// addresses the caller skips.
			name: "senders",
			text: "A message sent by\n  <s@example.com>\ncould not be delivered to:\n<skip@example.com>\n<e@example.com>\n" +
				"------ This is a copy of the message, including all the headers. ------\n" +
				"From: q@example.com\nTo: e@example.com\nSubject: hi\n",
			preamble: []string{"A message sent by", "  <s@example.com>", "could not be delivered to:", "<skip@example.com>"},
			blocks:   []textBlock{{"e@example.com", nil}},
		},
		{
			name:     "sender of the quoted original",
			text:     "Delivery failed:\nq@example.com\nf@example.com\n\n--- Below this line is a copy of the message.\n\nFrom: q@example.com\nTo: f@example.com\nSubject: hi\n",
			preamble: []string{"Delivery failed:", "q@example.com"},
			blocks:   []textBlock{{"f@example.com", []string{""}}},
		},
		{
			// A line that opens a new context in a transcript belongs,
			// with the lines after it, to the recipient that follows.
			name: "transcript contexts",
			text: "----- Transcript of session follows -----\n" +
				"550 <g@example.com>... User unknown\n" +
				"while talking to mx.example.net:\n>>> RCPT To:<h@example.net>\n" +
				"550 <h@example.net>... Mailbox disabled\n",
			preamble: []string{"----- Transcript of session follows -----"},
			blocks: []textBlock{
				{"g@example.com", []string{"550 User unknown"}},
				{"h@example.net", []string{"while talking to mx.example.net:", ">>> RCPT To:<h@example.net>", "550 Mailbox disabled", ""}},
			},
		},
	}
	skip := func(a string) bool { return strings.EqualFold(a, "skip@example.com") }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bt := readBounceText(tt.text, skip)
			if !slices.Equal(bt.preamble, tt.preamble) {
				t.Errorf("preamble = %q, want %q", bt.preamble, tt.preamble)
			}
			if len(bt.blocks) != len(tt.blocks) {
				t.Fatalf("blocks = %q, want %q", bt.blocks, tt.blocks)
			}
			for i, b := range bt.blocks {
				if b.addr != tt.blocks[i].addr || !slices.Equal(b.lines, tt.blocks[i].lines) {
					t.Errorf("block %d = %s %q, want %s %q", i, b.addr, b.lines, tt.blocks[i].addr, tt.blocks[i].lines)
				}
			}
		})
	}
}

// TestTextBounceRecipients checks whom a bounce without recipient lines is
// read for: the X-Failed-Recipients field, else the only recipient of the
// returned message.
func TestTextBounceRecipients(t *testing.T) {
	const daemon = "From: MAILER-DAEMON@mx.example\r\nSubject: Undelivered Mail Returned to Sender\r\n"
	tests := []struct {
		name string
		in   string
		kind Kind
		want []want
	}{
		{
			name: "X-Failed-Recipients",
			in:   daemon + "X-Failed-Recipients: a@example.com, b@example.com\r\n\r\nThe message could not be delivered: 550 5.1.1 user unknown.\r\n",
			kind: KindBounce,
			want: []want{
				{"a@example.com", "failed", "5.1.1", 550, "hard", ReasonUserUnknown},
				{"b@example.com", "failed", "5.1.1", 550, "hard", ReasonUserUnknown},
			},
		},
		{
			name: "one recipient of the returned message",
			in: daemon + "\r\nThe message could not be delivered: mailbox full.\r\n\r\n" +
				"------ This is a copy of the message, including all the headers. ------\r\n" +
				"From: s@sender.example\r\nTo: c@example.com\r\nSubject: hi\r\n\r\nhello\r\n",
			kind: KindBounce,
			want: []want{{addr: "c@example.com", action: "failed", verdict: "soft", reason: ReasonMailboxFull}},
		},
		{
			// With two recipients the returned message says nothing of
			// which failed; a daemon's bounce is a bounce all the same.
			name: "two recipients of the returned message",
			in: daemon + "\r\nThe message could not be delivered.\r\n\r\n" +
				"------ This is a copy of the message, including all the headers. ------\r\n" +
				"From: s@sender.example\r\nTo: c@example.com, d@example.com\r\nSubject: hi\r\n\r\nhello\r\n",
			kind: KindBounce,
		},
		{
			// Nor is a message that only says it failed, from no daemon,
			// a bounce with no one to bounce.
			name: "no recipient and no daemon",
			in:   "From: someone@example.com\r\nSubject: Undelivered Mail Returned to Sender\r\n\r\nThe message could not be delivered.\r\n",
			kind: KindNotBounce,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := Parse(strings.NewReader(tt.in), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Kind != tt.kind {
				t.Errorf("Kind = %q, want %q", rep.Kind, tt.kind)
			}
			checkRecipients(t, rep.Recipients, tt.want)
		})
	}
}
