package backends

import (
	"fmt"
	"strings"
)

// Status is where a message stands in its life. The names are those of the
// seed layout (ACCEPTED … FAILED-ACKNOWLEDGED) so that existing outbox tables
// keep their meaning.
type Status string

const (
	StatusAccepted   Status = "ACCEPTED"
	StatusIntaking   Status = "INTAKING"
	StatusReady      Status = "READY"
	StatusProcessing Status = "PROCESSING"
	StatusSent       Status = "SENT"
	StatusFailed     Status = "FAILED"
	StatusInvalid    Status = "INVALID"

	StatusCallingSent    Status = "CALLING-SENT-CALLBACK"
	StatusCallingFailed  Status = "CALLING-FAILED-CALLBACK"
	StatusCallingInvalid Status = "CALLING-INVALID-CALLBACK"

	StatusSentAcknowledged    Status = "SENT-ACKNOWLEDGED"
	StatusFailedAcknowledged  Status = "FAILED-ACKNOWLEDGED"
	StatusInvalidAcknowledged Status = "INVALID-ACKNOWLEDGED"

	// Not sent: every recipient is on the suppression list (Suppressions)
	// for the message's stream, at intake or when it was to be delivered.
	StatusSuppressed             Status = "SUPPRESSED"
	StatusCallingSuppressed      Status = "CALLING-SUPPRESSED-CALLBACK"
	StatusSuppressedAcknowledged Status = "SUPPRESSED-ACKNOWLEDGED"

	// After delivery: a recipient's server returned the message.
	StatusBounced             Status = "BOUNCED"
	StatusCallingBounced      Status = "CALLING-BOUNCED-CALLBACK"
	StatusBouncedAcknowledged Status = "BOUNCED-ACKNOWLEDGED"

	// After delivery of certified mail (PEC): the provider's receipts.
	StatusPECAccepted                 Status = "PEC-ACCEPTED"
	StatusCallingPECAccepted          Status = "CALLING-PEC-ACCEPTED-CALLBACK"
	StatusPECAcceptedAcknowledged     Status = "PEC-ACCEPTED-ACKNOWLEDGED"
	StatusPECNotAccepted              Status = "PEC-NOT-ACCEPTED"
	StatusCallingPECNotAccepted       Status = "CALLING-PEC-NOT-ACCEPTED-CALLBACK"
	StatusPECNotAcceptedAcknowledged  Status = "PEC-NOT-ACCEPTED-ACKNOWLEDGED"
	StatusPECDelivered                Status = "PEC-DELIVERED"
	StatusCallingPECDelivered         Status = "CALLING-PEC-DELIVERED-CALLBACK"
	StatusPECDeliveredAcknowledged    Status = "PEC-DELIVERED-ACKNOWLEDGED"
	StatusPECNotDelivered             Status = "PEC-NOT-DELIVERED"
	StatusCallingPECNotDelivered      Status = "CALLING-PEC-NOT-DELIVERED-CALLBACK"
	StatusPECNotDeliveredAcknowledged Status = "PEC-NOT-DELIVERED-ACKNOWLEDGED"
)

// callback is an outcome that plugins are told of: the message waits in
// calling while they are, and is acknowledged once they all have been.
type callback struct{ outcome, calling, acked Status }

func callbacks() []callback {
	return []callback{
		{StatusSent, StatusCallingSent, StatusSentAcknowledged},
		{StatusFailed, StatusCallingFailed, StatusFailedAcknowledged},
		{StatusInvalid, StatusCallingInvalid, StatusInvalidAcknowledged},
		{StatusSuppressed, StatusCallingSuppressed, StatusSuppressedAcknowledged},
		{StatusBounced, StatusCallingBounced, StatusBouncedAcknowledged},
		{StatusPECAccepted, StatusCallingPECAccepted, StatusPECAcceptedAcknowledged},
		{StatusPECNotAccepted, StatusCallingPECNotAccepted, StatusPECNotAcceptedAcknowledged},
		{StatusPECDelivered, StatusCallingPECDelivered, StatusPECDeliveredAcknowledged},
		{StatusPECNotDelivered, StatusCallingPECNotDelivered, StatusPECNotDeliveredAcknowledged},
	}
}

// Statuses lists every status in lifecycle order.
func Statuses() []Status {
	out := []Status{StatusAccepted, StatusIntaking, StatusReady, StatusProcessing}
	for _, c := range callbacks() {
		out = append(out, c.outcome, c.calling, c.acked)
	}
	return out
}

// ParseStatus accepts a status name in any letter case.
func ParseStatus(s string) (Status, error) {
	u := Status(strings.ToUpper(strings.TrimSpace(s)))
	for _, st := range Statuses() {
		if st == u {
			return st, nil
		}
	}
	return "", fmt.Errorf("unknown status %q (valid: %s)", s, joinStatuses(Statuses()))
}

func joinStatuses(ss []Status) string {
	names := make([]string, len(ss))
	for i, s := range ss {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// Working reports whether a status is held by a worker under a lease; such a
// status returns to Previous when the lease runs out.
func (s Status) Working() bool { return s.Previous() != "" }

// Previous is the status a working status returns to when its lease expires
// or its worker hands it back.
func (s Status) Previous() Status {
	switch s {
	case StatusIntaking:
		return StatusAccepted
	case StatusProcessing:
		return StatusReady
	}
	for _, c := range callbacks() {
		if s == c.calling {
			return c.outcome
		}
	}
	return ""
}

// Acknowledged reports whether every plugin has been told the message's
// outcome: the only statuses that retention may remove.
func (s Status) Acknowledged() bool {
	for _, c := range callbacks() {
		if s == c.acked {
			return true
		}
	}
	return false
}

// QueueClock says which of a message's times orders it within its status
// (Message.QueueTime).
type QueueClock int

const (
	ByLastChange QueueClock = iota // when the message reached the status
	ByDueTime                      // READY: when it may be sent
	ByCreation                     // ACCEPTED: its age, even when restored
)

// QueueClock is the time the status orders its messages by.
func (s Status) QueueClock() QueueClock {
	switch s {
	case StatusReady:
		return ByDueTime
	case StatusAccepted:
		return ByCreation
	}
	return ByLastChange
}

// WorkingStatuses lists the statuses held under a lease.
func WorkingStatuses() []Status { return statusesWhere(Status.Working) }

// AcknowledgedStatuses lists the statuses retention may remove.
func AcknowledgedStatuses() []Status { return statusesWhere(Status.Acknowledged) }

func statusesWhere(keep func(Status) bool) []Status {
	var out []Status
	for _, s := range Statuses() {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// Undelivered reports whether the message has not left the relay yet, so its
// spool file is still needed to send it.
func (s Status) Undelivered() bool {
	switch s {
	case StatusAccepted, StatusIntaking, StatusReady, StatusProcessing:
		return true
	}
	return false
}

// transitions lists, for each status, the statuses it may move to. Beyond the
// happy path of ARCHITECTURE.md it holds the moves of the housekeeping (restore,
// missing spool files) and of operators (cancel, retry).
func transitions(from Status) []Status {
	switch from {
	case StatusAccepted:
		// READY and INVALID straight: the relay that accepted a message
		// prepares it at once, holding no lease (intake.Worker.Accepted).
		return []Status{StatusIntaking, StatusReady, StatusInvalid, StatusFailed, StatusSuppressed}
	case StatusIntaking:
		return []Status{StatusReady, StatusInvalid, StatusAccepted, StatusSuppressed}
	case StatusReady:
		return []Status{StatusProcessing, StatusReady, StatusInvalid, StatusFailed}
	case StatusProcessing:
		return []Status{StatusSent, StatusFailed, StatusReady, StatusInvalid, StatusSuppressed}
	case StatusFailed:
		return []Status{StatusCallingFailed, StatusReady}
	case StatusInvalid:
		return []Status{StatusCallingInvalid, StatusAccepted}
	case StatusFailedAcknowledged, StatusSuppressedAcknowledged:
		// An operator's retry (after removing the entries, for SUPPRESSED).
		return []Status{StatusReady}
	case StatusInvalidAcknowledged:
		return []Status{StatusAccepted}
	// What comes after the app heard SENT: a bounce, or the PEC receipts.
	// A receipt that arrives late (acceptance after delivery) moves no
	// status back; another recipient's bounce or error comes again.
	case StatusSentAcknowledged:
		return []Status{StatusBounced, StatusPECAccepted, StatusPECNotAccepted, StatusPECDelivered, StatusPECNotDelivered}
	case StatusBouncedAcknowledged:
		return []Status{StatusBounced}
	case StatusPECAcceptedAcknowledged:
		return []Status{StatusPECDelivered, StatusPECNotDelivered}
	case StatusPECNotDeliveredAcknowledged:
		return []Status{StatusPECNotDelivered}
	}
	for _, c := range callbacks() {
		switch from {
		case c.outcome:
			return []Status{c.calling}
		case c.calling:
			return []Status{c.acked, c.outcome}
		}
	}
	return nil
}

// CanTransition reports whether a message may move from one status to another.
func CanTransition(from, to Status) bool {
	for _, s := range transitions(from) {
		if s == to {
			return true
		}
	}
	return false
}

// CheckTransition returns an error wrapping ErrInvalidTransition when the move
// is not allowed. Stores call it before touching anything.
func CheckTransition(from, to Status) error {
	if CanTransition(from, to) {
		return nil
	}
	return fmt.Errorf("%w: %s to %s (from %s a message may go to: %s)",
		ErrInvalidTransition, from, to, from, joinStatuses(transitions(from)))
}
