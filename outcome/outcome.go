// Package outcome holds what the relay reports about a message beyond its
// status: the result for each recipient, the fields of a bounce, the fields
// of a PEC receipt. The outbox stores them, the admin API shows them, and
// plugins receive them (plugins/sdk re-exports these types), so they are
// defined once, here, below everything that uses them.
package outcome

import "time"

// Recipient states.
const (
	RecipientPending = "pending" // not tried yet, or deferred
	RecipientSent    = "sent"    // accepted upstream
	RecipientFailed  = "failed"  // refused for good, or expired
	// RecipientSuppressed: held back by the suppression list, never sent;
	// Text says which entry, since when.
	RecipientSuppressed = "suppressed"
)

// Verdict is what a failure says of the address itself, apart from what
// became of the message: hard is evidence that the address cannot receive
// mail (no such user, no such domain, a mailbox disabled or closed, moved
// without forwarding), which only a permanent refusal of that address
// gives; soft is any other failure (an expiry after temporary replies, the
// network, a full mailbox, rate limits, a refusal of the sender or of the
// content), which is the sender's problem or the moment's. Empty where no
// failure was reported: an accepted recipient, one not tried yet, an
// address the message was not sent to.
type Verdict string

// Verdicts.
const (
	VerdictHard Verdict = "hard"
	VerdictSoft Verdict = "soft"
)

// Recipient is what became of one envelope recipient.
type Recipient struct {
	Address string `json:"address"`
	// Status is RecipientPending, RecipientSent, RecipientFailed or
	// RecipientSuppressed.
	Status string `json:"status"`
	// Verdict is what the last failure said of the address: hard only
	// for a permanent refusal of this address (at its RCPT TO, or the
	// relay's finding that its domain has no mail server); soft for any
	// other failure, a deferral or an expiry included.
	Verdict Verdict `json:"verdict,omitempty"`
	// Code and EnhancedCode are the upstream's reply ("550", "5.1.1"),
	// Text its words or the relay's own explanation; Host is the upstream
	// host, At when the reply came.
	Code         int       `json:"code,omitempty"`
	EnhancedCode string    `json:"enhanced_code,omitempty"`
	Text         string    `json:"text,omitempty"`
	Host         string    `json:"host,omitempty"`
	At           time.Time `json:"at,omitzero"`
	// TLS is how the session that carried the reply was secured; nil
	// when no session opened (the relay's own verdicts).
	TLS *TLS `json:"tls,omitempty"`
}

// TLS is how a session with an upstream was secured.
type TLS struct {
	// Policy is what the relay required of it: none, opportunistic,
	// verify, dane, mta-sts or mta-sts-testing for an MX host
	// (delivery.tls.policies, DANE where the host publishes
	// authenticated TLSA records, else the domain's MTA-STS policy); a
	// smarthost route's tls mode (none, opportunistic, starttls, tls)
	// otherwise.
	Policy string `json:"policy"`
	// Version and Cipher are the TLS version ("TLS 1.3") and cipher
	// suite; both empty for a session in clear.
	Version string `json:"version,omitempty"`
	Cipher  string `json:"cipher,omitempty"`
	// Verified says what verified the peer: VerifiedDANEEE,
	// VerifiedDANETA, VerifiedPKIX, or VerifiedNone.
	Verified string `json:"verified"`
}

// What verified a peer (TLS.Verified).
const (
	// VerifiedDANEEE: its certificate or public key matched a DANE-EE
	// TLSA record (RFC 7672 section 3.1.1).
	VerifiedDANEEE = "dane-ee"
	// VerifiedDANETA: its chain led to a DANE-TA TLSA record's trust
	// anchor, for its name (RFC 7672 section 3.1.2).
	VerifiedDANETA = "dane-ta"
	// VerifiedPKIX: its chain led to a trusted authority, for its name.
	VerifiedPKIX = "pkix"
	// VerifiedNone: nothing did (a session in clear, or opportunistic
	// TLS, which takes any certificate).
	VerifiedNone = "none"
)

// String is the session's TLS in a few words, as queue show says it:
// "TLS 1.3 TLS_AES_128_GCM_SHA256, policy dane, verified dane-ee".
func (t *TLS) String() string {
	if t == nil {
		return ""
	}
	s := "in clear"
	if t.Version != "" {
		s = t.Version + " " + t.Cipher
	}
	return s + ", policy " + t.Policy + ", verified " + t.Verified
}

// Bounce is a delivery status notification or a complaint.
type Bounce struct {
	// Kind is bounce, delay or complaint.
	Kind string `json:"kind"`
	// Type is hard when a recipient of the message has a hard verdict,
	// else soft; empty for a complaint.
	Type         string            `json:"type,omitempty"`
	ReportingMTA string            `json:"reporting_mta,omitempty"`
	ArrivalDate  string            `json:"arrival_date,omitempty"`
	Recipients   []BounceRecipient `json:"recipients,omitempty"`
	// MatchedBy says how the bounce was tied to its message.
	MatchedBy string `json:"matched_by,omitempty"`
}

// BounceRecipient is one recipient of a bounce, as the reporting server
// described it.
type BounceRecipient struct {
	FinalRecipient    string `json:"final_recipient,omitempty"`
	OriginalRecipient string `json:"original_recipient,omitempty"`
	Action            string `json:"action,omitempty"`
	Status            string `json:"status,omitempty"`
	SMTPCode          int    `json:"smtp_code,omitempty"`
	// Reason is the relay's classification: user_unknown, mailbox_full, …
	Reason string `json:"reason,omitempty"`
	// Verdict is what the bounce says of the address the message was
	// sent to (see Verdict): OriginalRecipient when the report gives one,
	// else FinalRecipient. Empty when NotRecipient.
	Verdict Verdict `json:"verdict,omitempty"`
	// NotRecipient says that address is not one the message was sent to
	// (a list's own address, a postmaster, a forwarding hop): the bounce
	// says nothing of the message's recipients, and the address has no
	// verdict.
	NotRecipient bool   `json:"not_recipient,omitempty"`
	RemoteMTA    string `json:"remote_mta,omitempty"`
	Diagnostic   string `json:"diagnostic,omitempty"`
}

// PEC is an Italian certified mail receipt.
type PEC struct {
	ReceiptType string `json:"receipt_type"`
	Transport   string `json:"transport,omitempty"`
	// Source says where the fields were read: daticert, headers, both
	// or body.
	Source      string         `json:"source,omitempty"`
	Sender      string         `json:"sender,omitempty"`
	Recipients  []PECRecipient `json:"recipients,omitempty"`
	Subject     string         `json:"subject,omitempty"`
	Issuer      string         `json:"issuer,omitempty"`
	Date        string         `json:"date,omitempty"`
	Identifier  string         `json:"identifier,omitempty"`
	MsgID       string         `json:"msgid,omitempty"`
	Delivery    string         `json:"delivery,omitempty"`
	Error       string         `json:"error,omitempty"`
	ErrorDetail string         `json:"error_detail,omitempty"`
	// Signature is valid, invalid or "not checked"; Signer names the
	// signer.
	Signature string `json:"signature,omitempty"`
	Signer    string `json:"signer,omitempty"`
}

// PECRecipient is one recipient a receipt lists; Type is certificato for a
// PEC mailbox, esterno for an ordinary one.
type PECRecipient struct {
	Address string `json:"address"`
	Type    string `json:"type,omitempty"`
}

// Unsubscribe is a recipient's unsubscribe from a stream (UNSUBSCRIBED).
type Unsubscribe struct {
	Recipient string `json:"recipient"`
	Stream    string `json:"stream"`
	// Via is how it came: https (one-click) or mailto.
	Via string    `json:"via"`
	At  time.Time `json:"at"`
}

// BatchSuspension is the brake's suspension of a batch
// (BATCH-SUSPENDED): why, and the counts and thresholds it crossed.
type BatchSuspension struct {
	Batch  string `json:"batch"`
	Reason string `json:"reason"`
	// Sent, Hard and Complaints are what the brake counted: recipients
	// accepted, hard verdicts, complaints.
	Sent       int64 `json:"sent"`
	Hard       int64 `json:"hard"`
	Complaints int64 `json:"complaints"`
	// The thresholds: rates are shares (0.05 is 5 %).
	MinSent          int64   `json:"min_sent"`
	MaxHardRate      float64 `json:"max_hard_rate"`
	MaxComplaintRate float64 `json:"max_complaint_rate"`
}
