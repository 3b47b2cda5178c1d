// Package admin is the relay's HTTP API for operators and the client that
// `postino queue` and `postino batch` use.
package admin

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/outcome"
)

// Message is a message as the API shows it.
type Message struct {
	ID         string              `json:"id"`
	MessageID  string              `json:"message_id"`
	Status     string              `json:"status"`
	Reason     string              `json:"reason,omitempty"`
	Attempts   int                 `json:"attempts"`
	Priority   int                 `json:"priority"`
	Batch      string              `json:"batch,omitempty"`
	Route      string              `json:"route,omitempty"`
	DueAt      time.Time           `json:"due_at"`
	LeaseUntil *time.Time          `json:"lease_until,omitempty"`
	CreatedAt  time.Time           `json:"created_at"`
	UpdatedAt  time.Time           `json:"updated_at"`
	Sender     string              `json:"sender"`
	Recipients []outcome.Recipient `json:"recipients"`
	Size       int64               `json:"size"`
	Client     string              `json:"client,omitempty"`
	AuthUser   string              `json:"auth_user,omitempty"`
	EmlPath    string              `json:"eml_path"`
	// Waiting says why a READY message waits (Waiting*), where the API
	// looked it up (one message, lists, searches).
	Waiting string `json:"waiting,omitempty"`
	// HeldBy names the suspended batch that holds a READY message.
	HeldBy string `json:"held_by,omitempty"`
	// Actions are the operator's actions the API takes for the message
	// as it is now: retry, cancel.
	Actions []string `json:"actions"`
	// History and Events are filled in for a single message, oldest first.
	History []HistoryEntry `json:"history,omitempty"`
	Events  []Event        `json:"events,omitempty"`
}

// Event is one outcome told, or to be told, to the plugins.
type Event struct {
	ID        string    `json:"event_id"`
	MessageID string    `json:"message_id,omitempty"`
	Seq       int64     `json:"seq"`
	Outcome   string    `json:"outcome"`
	Reason    string    `json:"reason,omitempty"`
	At        time.Time `json:"at"`
	State     string    `json:"state"`
	Attempts  int       `json:"attempts"`
	LastError string    `json:"last_error,omitempty"`
	Acked     []string  `json:"acked,omitempty"`
	// Details are what the outcome carries: a delivery attempt's
	// recipients, a bounce's report, a PEC receipt's fields.
	Details json.RawMessage `json:"details,omitempty"`
}

// HistoryEntry is one status change.
type HistoryEntry struct {
	Status  string    `json:"status"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
	Details any       `json:"details,omitempty"`
}

// Readiness is the answer of /readyz: ready, degraded (mail flows, a
// plugin or a mailbox is down) or not ready, with each check.
type Readiness struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
	// Error sums up the failing checks when not ready.
	Error string `json:"error,omitempty"`
}

// Failing sums up the checks that are not ok, in name order, or is empty.
func (r Readiness) Failing() string {
	var bad []string
	for name, v := range r.Checks {
		if v != "ok" {
			bad = append(bad, name+": "+v)
		}
	}
	slices.Sort(bad)
	return strings.Join(bad, "; ")
}

// EventList is a list of events.
type EventList struct {
	Events []Event `json:"events"`
}

func eventView(e *backends.Event) Event {
	return Event{ID: e.ID, MessageID: e.MessageID, Seq: e.Seq, Outcome: e.Outcome, Reason: e.Reason, At: e.At,
		State: string(e.State), Attempts: e.Attempts, LastError: e.LastError, Acked: e.Acked, Details: e.Details}
}

// ReceiptList lists the receipts kept with a message.
type ReceiptList struct {
	Receipts []backends.Receipt `json:"receipts"`
}

// MessageList is a page of messages.
type MessageList struct {
	Messages []Message `json:"messages"`
	// Next is the cursor of the next page, empty on the last.
	Next string `json:"next,omitempty"`
}

// Error is the body of every error answer.
type Error struct {
	Error string `json:"error"`
}

// Why a READY message waits.
const (
	// WaitingDue: it is due, and goes out as soon as a worker is free.
	WaitingDue = "due"
	// WaitingDeferred: an attempt failed for now; the next is later.
	WaitingDeferred = "deferred"
	// WaitingScheduled: the app asked for it to leave later
	// (X-Postino-Send-After), and it was never tried.
	WaitingScheduled = "scheduled"
	// WaitingSuspended: its batch is suspended.
	WaitingSuspended = "suspended"
)

// waiting says why a message in status waits, or "" when it is not READY.
func waiting(status, batch string, attempts int, due time.Time, suspended map[string]bool, now time.Time) string {
	switch {
	case status != string(backends.StatusReady):
		return ""
	case batch != "" && suspended[batch]:
		return WaitingSuspended
	case !due.After(now):
		return WaitingDue
	case attempts > 0:
		return WaitingDeferred
	}
	return WaitingScheduled
}

// retryResults are a retried message's results: those who got it keep
// theirs; the others (failed, suppressed) are tried again, and the
// suppression list is read again for them.
func retryResults(m *backends.Message) []outcome.Recipient {
	out := m.RecipientResults()
	for i := range out {
		if out[i].Status != outcome.RecipientSent {
			out[i] = outcome.Recipient{Address: out[i].Address, Status: outcome.RecipientPending}
		}
	}
	return out
}

// retryTo is where an operator's retry takes a message in st, or "" and
// why not.
func retryTo(st backends.Status) (backends.Status, string) {
	switch st {
	case backends.StatusReady, backends.StatusFailed, backends.StatusFailedAcknowledged:
		return backends.StatusReady, "retry requested by an operator"
	case backends.StatusSuppressedAcknowledged:
		return backends.StatusReady, "retry requested by an operator; recipients still on the suppression list are held back again"
	case backends.StatusInvalid, backends.StatusInvalidAcknowledged:
		return backends.StatusAccepted, "intake again requested by an operator"
	}
	return "", "only READY, FAILED, SUPPRESSED-ACKNOWLEDGED and INVALID messages can be retried"
}

// retryDue is when a message an operator retries at is due. A READY
// message is due now: retrying it means "send it now". A FAILED or INVALID
// one that never left, with an X-Postino-Send-After still ahead (an
// operator cancelled it while it waited for that time), waits for it
// again, unless the operator says now. One that was tried (deferred, then
// failed or cancelled) is due now: its send-after had passed.
func retryDue(m *backends.Message, now bool, at time.Time) time.Time {
	if send := m.SendAfter(); !now && m.Status != backends.StatusReady && m.Attempts == 0 && send.After(at) {
		return send
	}
	return at
}

// cancelTo is where an operator's cancel takes a message in st: FAILED,
// and the app is told so like of any other failure; or "" and why not.
func cancelTo(st backends.Status) (backends.Status, string) {
	switch st {
	case backends.StatusAccepted, backends.StatusReady:
		return backends.StatusFailed, "cancelled by an operator"
	case backends.StatusIntaking, backends.StatusProcessing:
		return "", "a worker holds it right now; try again in a moment"
	}
	return "", "only messages that have not been sent (ACCEPTED, READY) can be cancelled"
}

// actions are the operator's actions the API takes for a message in st.
func actions(st backends.Status) []string {
	out := []string{}
	if to, _ := retryTo(st); to != "" {
		out = append(out, "retry")
	}
	if to, _ := cancelTo(st); to != "" {
		out = append(out, "cancel")
	}
	return out
}

func messageView(m *backends.Message) Message {
	v := Message{
		ID: m.ID, MessageID: m.MessageID, Status: string(m.Status), Reason: m.Reason,
		Attempts: m.Attempts, Priority: m.Priority, Batch: m.Batch, Route: m.Route,
		DueAt: m.DueAt, CreatedAt: m.CreatedAt, UpdatedAt: m.UpdatedAt,
		Sender: m.Envelope.Sender, Size: m.Envelope.Size, Client: m.Envelope.ClientAddr,
		AuthUser: m.Envelope.AuthUser, EmlPath: m.EmlPath,
		Recipients: m.RecipientResults(), Actions: actions(m.Status),
	}
	if !m.LeaseUntil.IsZero() {
		t := m.LeaseUntil
		v.LeaseUntil = &t
	}
	return v
}
