package backends

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/genropy/postino/outcome"
)

// Priorities of X-Postino-Priority, as in the seed: lower is sooner.
const (
	PriorityImmediate = 0
	PriorityHigh      = 1
	PriorityNormal    = 2
	PriorityLow       = 3
)

// Message is one outbox row.
type Message struct {
	// ID is the X-Genro-Mail-ID: set by the app or generated at intake.
	ID string `json:"id"`
	// MessageID is the Message-ID header, without angle brackets.
	MessageID string `json:"message_id,omitempty"`
	Status    Status `json:"status"`
	// Reason explains the latest status.
	Reason string `json:"reason,omitempty"`
	// Version counts the row's updates where the store keeps it (MySQL).
	Version int `json:"version"`

	Priority int    `json:"priority"`
	Batch    string `json:"batch,omitempty"`
	// DueAt is the earliest time the message may be claimed from READY.
	DueAt    time.Time `json:"due_at"`
	Attempts int       `json:"attempts"`
	// LeaseUntil is when a working status (INTAKING, PROCESSING,
	// CALLING-*) expires and the message returns one step back.
	LeaseUntil time.Time `json:"lease_until,omitzero"`
	// Route names the delivery route chosen at intake.
	Route string `json:"route,omitempty"`

	// EmlPath is the spool file, relative to the spool directory, or
	// BodyRef's name for bytes the store keeps itself (spool.store outbox).
	EmlPath string `json:"eml_path"`
	// Body is the message's bytes, given to Create when the store keeps
	// them (EmlPath is then a BodyRef): they are committed with the row.
	// Stores never fill it on read; OpenBody reads them.
	Body []byte `json:"-"`
	// PayloadPath is kept for rows migrated from the seed layout, whose
	// envelope lived in a JSON file; Postino keeps the envelope in the row.
	PayloadPath string `json:"payload_path,omitempty"`

	Envelope Envelope `json:"envelope"`
	// Results holds the latest result of each recipient, in envelope order,
	// once a delivery has been attempted.
	Results []outcome.Recipient `json:"results,omitempty"`

	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// TTL is when a store that expires items (DynamoDB) may drop the
	// message, in Unix seconds; nil where the store keeps no TTL.
	TTL *int64 `json:"ttl,omitempty"`
}

// Envelope is what the SMTP transaction told the relay about the message.
type Envelope struct {
	// Sender is the MAIL FROM address; empty for the null sender <>.
	Sender     string    `json:"sender"`
	Recipients []string  `json:"recipients"`
	ClientAddr string    `json:"client_addr,omitempty"`
	Helo       string    `json:"helo,omitempty"`
	AuthUser   string    `json:"auth_user,omitempty"`
	TLS        bool      `json:"tls,omitempty"`
	ReceivedAt time.Time `json:"received_at"`
	// SMTPUTF8 is set when the client asked for it: the addresses or
	// headers may hold UTF-8 and the upstream must offer SMTPUTF8.
	SMTPUTF8 bool `json:"smtputf8,omitempty"`
	// EightBit is set when the content holds octets above 127.
	EightBit bool  `json:"eight_bit,omitempty"`
	Size     int64 `json:"size"`
	// Control holds the X-Postino-* header values as the app wrote them.
	Control map[string]string `json:"control,omitempty"`
	// Refused is why intake refused a message whose sender no reply could
	// tell (a row of a submissions table): the intake worker makes it
	// INVALID with this reason.
	Refused string `json:"refused,omitempty"`
}

// HeaderSendAfter is the control header that holds a message back until a
// time: Unix seconds or an RFC 3339 time, kept in Envelope.Control as the
// app wrote it.
const HeaderSendAfter = "X-Postino-Send-After"

// ParseSendAfter reads a value of X-Postino-Send-After.
func ParseSendAfter(v string) (time.Time, bool) {
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		return time.Unix(secs, 0).UTC(), true
	}
	t, err := time.Parse(time.RFC3339, v)
	return t.UTC(), err == nil
}

// SendAfter is the time the app asked the message to leave at
// (X-Postino-Send-After), zero when it asked for none. Unlike DueAt, which
// retries and operators move, it stays what the app asked.
func (m *Message) SendAfter() time.Time {
	v, ok := m.Envelope.Control[HeaderSendAfter]
	if !ok {
		return time.Time{}
	}
	t, _ := ParseSendAfter(v)
	return t
}

// RecipientResults returns the message's results, with every envelope
// recipient that has none yet pending.
func (m *Message) RecipientResults() []outcome.Recipient {
	out := make([]outcome.Recipient, len(m.Envelope.Recipients))
	for i, a := range m.Envelope.Recipients {
		out[i] = outcome.Recipient{Address: a, Status: outcome.RecipientPending}
		if i < len(m.Results) && m.Results[i].Address == a {
			out[i] = m.Results[i]
		}
	}
	return out
}

// QueueTime is the time by which the message waits in its status: within a
// priority, claims take the earliest first, and retention purges by it. It
// is the due time in READY, the creation time in ACCEPTED (so that a message
// returned to ACCEPTED keeps its place), the last change otherwise.
// Stores order a status's messages by priority, QueueTime, CreatedAt, ID.
func (m *Message) QueueTime() time.Time {
	switch m.Status.QueueClock() {
	case ByDueTime:
		return m.DueAt
	case ByCreation:
		return m.CreatedAt
	}
	return m.UpdatedAt
}

// HistoryEntry is one status change of a message.
type HistoryEntry struct {
	Status Status    `json:"status"`
	Reason string    `json:"reason,omitempty"`
	At     time.Time `json:"at"`
	// Details holds structured data about the change (per-recipient SMTP
	// results, for instance) as a JSON object.
	Details json.RawMessage `json:"details,omitempty"`
}

// Alarm is a check owed to a message at a time (see Alarms); a message has
// at most one alarm of each kind.
type Alarm struct {
	Kind      string    `json:"kind"`
	MessageID string    `json:"message_id"`
	At        time.Time `json:"at"`
}

// Check accepts an alarm before a store looks at anything.
func (a Alarm) Check() error {
	if err := checkToken("alarm kind", a.Kind, 32, "-_."); err != nil {
		return err
	}
	if a.At.IsZero() {
		return fmt.Errorf("alarm %s of %s has no time", a.Kind, a.MessageID)
	}
	return CheckID(a.MessageID)
}

// ListQuery selects messages for operators.
type ListQuery struct {
	// Status, when set, lists messages in that status in claim order;
	// otherwise the newest messages come first.
	Status Status
	// Batch, when set, lists only the messages of that batch, in an order
	// the store's index of batches gives.
	Batch string
	// After continues a listing where the previous page ended: the cursor
	// that List returned with it.
	After string
	// Limit bounds the page; zero or less means DefaultPageSize.
	Limit int
}

// DefaultPageSize is the page of a listing that sets no limit.
const DefaultPageSize = 100

// PageSize is the number of messages a page of q holds at most.
func (q ListQuery) PageSize() int {
	if q.Limit <= 0 {
		return DefaultPageSize
	}
	return q.Limit
}

// MaxIDLength is the longest X-Genro-Mail-ID: a UUID's 36 characters.
const MaxIDLength = 36

// PrepareCreate checks a message given to Create and fills in what the
// caller may leave out: it is ACCEPTED, created now unless the caller says
// when, and due when created unless held for later. The store sets Version.
func (m *Message) PrepareCreate(now time.Time) error {
	if err := CheckID(m.ID); err != nil {
		return err
	}
	if m.Priority < PriorityImmediate || m.Priority > PriorityLow {
		return fmt.Errorf("priority %d is out of range 0..3", m.Priority)
	}
	if m.CreatedAt.IsZero() {
		m.CreatedAt = now
	}
	if m.DueAt.IsZero() {
		m.DueAt = m.CreatedAt
	}
	m.Status, m.UpdatedAt, m.LeaseUntil = StatusAccepted, m.CreatedAt, time.Time{}
	return nil
}

// CheckID reports whether id is a valid message id: 1 to 36 letters, digits,
// '-', '_' or '.'. Stores and file names rely on that alphabet.
func CheckID(id string) error {
	return checkToken("message id", id, MaxIDLength, "-_.")
}

// CheckLinkKey accepts a link key.
func CheckLinkKey(key string) error {
	if key == "" || len(key) > 255 {
		return fmt.Errorf("link key %q: give 1 to 255 characters", key)
	}
	return nil
}

// MaxBatchLength bounds X-Postino-Batch codes.
const MaxBatchLength = 64

// CheckBatch reports whether code is a valid batch code: 1 to 64 letters,
// digits, '-', '_', '.' or ':'.
func CheckBatch(code string) error {
	return checkToken("batch code", code, MaxBatchLength, "-_.:")
}

func checkToken(what, s string, max int, punct string) error {
	if s == "" || len(s) > max {
		return fmt.Errorf("%s %q must be 1 to %d characters long", what, s, max)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(punct, c) >= 0
		if !ok {
			return fmt.Errorf("%s %q holds %q: only letters, digits and %q are allowed", what, s, c, punct)
		}
	}
	return nil
}
