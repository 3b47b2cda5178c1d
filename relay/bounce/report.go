// Package bounce reads what comes back after delivery: delivery status
// notifications (RFC 3464) and the bounces real servers write without it,
// delay notices, auto-replies and feedback-loop complaints (RFC 5965). It
// says what kind each is, what became of each recipient and why, in terms a
// user can act on, and which keys tie it to the message it is about.
package bounce

import (
	"time"

	"github.com/genropy/postino/outcome"
)

// Kind tells a bounce from the other mail a bounce mailbox receives.
type Kind string

const (
	KindBounce    Kind = "bounce"       // a recipient failed for good
	KindDelay     Kind = "delay"        // delivery is delayed and still tried
	KindAutoReply Kind = "auto-reply"   // out of office and other RFC 3834 replies
	KindComplaint Kind = "complaint"    // a feedback-loop report (ARF)
	KindNotBounce Kind = "not-a-bounce" // anything else
)

// Reason is why a recipient bounced, from a fixed list a user can act on.
type Reason string

const (
	ReasonUserUnknown     Reason = "user_unknown"     // the address does not exist: remove it
	ReasonMailboxDisabled Reason = "mailbox_disabled" // the account is suspended or closed
	ReasonMailboxFull     Reason = "mailbox_full"     // over quota
	ReasonDomainNotFound  Reason = "domain_not_found" // no such domain, no MX
	ReasonSpam            Reason = "spam"             // rejected as spam, or by a content filter
	ReasonVirus           Reason = "virus"            // a virus was found
	ReasonBlocked         Reason = "blocked"          // the sender is blocked: IP, reputation, blocklist, missing PTR
	ReasonAuthentication  Reason = "authentication"   // SPF, DKIM or DMARC failed
	ReasonPolicy          Reason = "policy"           // refused by the receiver's policy
	ReasonTooLarge        Reason = "too_large"        // the message is larger than the receiver takes
	ReasonRateLimited     Reason = "rate_limited"     // too many messages or connections
	ReasonExpired         Reason = "expired"          // not delivered in time
	ReasonNetwork         Reason = "network"          // the receiver could not be reached
	ReasonSystem          Reason = "system"           // the receiver's system failed
	ReasonOther           Reason = "other"
)

// Recipient is what the report says of one recipient.
type Recipient struct {
	// FinalRecipient is the address the report is about.
	FinalRecipient    string `json:"final_recipient"`
	OriginalRecipient string `json:"original_recipient,omitempty"`
	// Action is failed, delayed, delivered, relayed or expanded.
	Action string `json:"action"`
	// Status is the enhanced status code as written, "5.1.1".
	Status   string `json:"status,omitempty"`
	SMTPCode int    `json:"smtp_code,omitempty"`
	// Verdict is what the failure says of the address (outcome.Verdict):
	// hard when the receiver refused the address itself for good (it does
	// not exist, nor does its domain, its account is closed); soft for
	// everything else, among them an expiry after temporary replies and
	// any refusal of the sender or the content. docs/bounces.md has the
	// table of reasons.
	Verdict    outcome.Verdict `json:"verdict,omitempty"`
	Reason     Reason          `json:"reason,omitempty"`
	RemoteMTA  string          `json:"remote_mta,omitempty"`
	Diagnostic string          `json:"diagnostic,omitempty"`
}

// Keys are what ties a report to the message it is about, in the order
// they are tried.
type Keys struct {
	// MailID is the X-Genro-Mail-ID of the returned headers.
	MailID string `json:"mail_id,omitempty"`
	// VERP is the id carried in the bounce address the route used.
	VERP string `json:"verp,omitempty"`
	// MessageID is the returned Message-ID, without angle brackets.
	MessageID string `json:"message_id,omitempty"`
	// EnvID is the ENVID the relay gave at MAIL FROM.
	EnvID string `json:"envid,omitempty"`
}

// Report is what one message of a bounce mailbox says.
type Report struct {
	Kind Kind `json:"kind"`
	// MessageID is the report's own Message-ID: a report read twice is
	// recognised by it.
	MessageID    string      `json:"message_id,omitempty"`
	ReportingMTA string      `json:"reporting_mta,omitempty"`
	ArrivalDate  time.Time   `json:"arrival_date,omitzero"`
	Recipients   []Recipient `json:"recipients,omitempty"`
	Keys         Keys        `json:"keys"`
	// FeedbackType is the ARF feedback type of a complaint (abuse, fraud, ...).
	FeedbackType string `json:"feedback_type,omitempty"`
}

// Options say what the reader cannot know from a message alone.
type Options struct {
	// BounceAddresses are the routes' bounce address templates; "{id}" in
	// one stands for a message id (VERP).
	BounceAddresses []string
}
