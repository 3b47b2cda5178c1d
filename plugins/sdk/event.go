package sdk

import (
	"time"

	"github.com/genropy/postino/outcome"
	pb "github.com/genropy/postino/plugins/proto"
)

// Event is one outcome of one message, as a plugin sees it. Its JSON form
// is what the shipped webhook posts and the exec plugin writes to standard
// input.
type Event struct {
	// EventID is stable across retries: drop duplicates by it.
	EventID string `json:"event_id"`
	// MessageID is the message's X-Genro-Mail-ID.
	MessageID string `json:"message_id"`
	// RFC822MessageID is its Message-ID header, without angle brackets.
	RFC822MessageID string `json:"rfc822_message_id,omitempty"`
	// Outcome is a status the message reaches: SENT, FAILED, INVALID,
	// SUPPRESSED (every recipient on the suppression list), BOUNCED and
	// the PEC outcomes; or a notice that moves no status: DELAYED,
	// COMPLAINED, UNSUBSCRIBED, BATCH-SUSPENDED and the other PEC
	// receipts.
	Outcome        string      `json:"outcome"`
	PreviousStatus string      `json:"previous_status,omitempty"`
	Reason         string      `json:"reason,omitempty"`
	At             string      `json:"at"`
	Attempts       int         `json:"attempts"`
	Sender         string      `json:"sender"`
	Batch          string      `json:"batch,omitempty"`
	Priority       int         `json:"priority"`
	Route          string      `json:"route,omitempty"`
	Recipients     []Recipient `json:"recipients"`
	Bounce         *Bounce     `json:"bounce,omitempty"`
	PEC            *PEC        `json:"pec,omitempty"`
	// Stream is the message's stream, set for a SUPPRESSED event.
	Stream string `json:"stream,omitempty"`
	// Unsubscribe is set for an UNSUBSCRIBED event.
	Unsubscribe *Unsubscribe `json:"unsubscribe,omitempty"`
	// BatchSuspension is set for a BATCH-SUSPENDED event.
	BatchSuspension *BatchSuspension `json:"batch_suspension,omitempty"`
	// DeliveryAttempt counts the tries of this event, from 1.
	DeliveryAttempt int `json:"delivery_attempt"`
}

// The details of an event, as the relay records them (package outcome
// defines them once for the relay and for plugins).
type (
	// Recipient is what became of one envelope recipient.
	Recipient = outcome.Recipient
	// Bounce is a delivery status notification or a complaint.
	Bounce = outcome.Bounce
	// BounceRecipient is one recipient of a bounce.
	BounceRecipient = outcome.BounceRecipient
	// Verdict is what a failure says of an address: hard or soft.
	Verdict = outcome.Verdict
	// PEC is an Italian certified mail receipt.
	PEC = outcome.PEC
	// PECRecipient is one recipient a PEC receipt lists.
	PECRecipient = outcome.PECRecipient
	// Unsubscribe is a recipient's unsubscribe from a stream.
	Unsubscribe = outcome.Unsubscribe
	// BatchSuspension is the brake's suspension of a batch.
	BatchSuspension = outcome.BatchSuspension
	// TLS is how a session with an upstream was secured.
	TLS = outcome.TLS
)

// FromProto converts the wire form.
func FromProto(e *pb.Event) *Event {
	out := &Event{
		EventID: e.EventId, MessageID: e.MessageId, RFC822MessageID: e.Rfc822MessageId, Outcome: e.Outcome,
		PreviousStatus: e.PreviousStatus, Reason: e.Reason, At: e.At, Attempts: int(e.Attempts), Sender: e.Sender,
		Batch: e.Batch, Priority: int(e.Priority), Route: e.Route, DeliveryAttempt: int(e.DeliveryAttempt), Stream: e.Stream,
		Recipients: make([]Recipient, len(e.Recipients)),
	}
	for i, r := range e.Recipients {
		out.Recipients[i] = Recipient{Address: r.Address, Status: r.Status, Verdict: outcome.Verdict(r.Verdict), Code: int(r.Code),
			EnhancedCode: r.EnhancedCode, Text: r.Text, Host: r.Host, At: parseTime(r.At)}
		if t := r.Tls; t != nil {
			out.Recipients[i].TLS = &TLS{Policy: t.Policy, Version: t.Version, Cipher: t.Cipher, Verified: t.Verified}
		}
	}
	if b := e.Bounce; b != nil {
		out.Bounce = &Bounce{Kind: b.Kind, Type: b.Type, ReportingMTA: b.ReportingMta, ArrivalDate: b.ArrivalDate, MatchedBy: b.MatchedBy}
		for _, r := range b.Recipients {
			out.Bounce.Recipients = append(out.Bounce.Recipients, BounceRecipient{FinalRecipient: r.FinalRecipient,
				OriginalRecipient: r.OriginalRecipient, Action: r.Action, Status: r.Status, SMTPCode: int(r.SmtpCode),
				Reason: r.Reason, Verdict: outcome.Verdict(r.Verdict), NotRecipient: r.NotRecipient, RemoteMTA: r.RemoteMta, Diagnostic: r.Diagnostic})
		}
	}
	if p := e.Pec; p != nil {
		out.PEC = &PEC{ReceiptType: p.ReceiptType, Transport: p.Transport, Source: p.Source, Sender: p.Sender, Subject: p.Subject,
			Issuer: p.Issuer, Date: p.Date, Identifier: p.Identifier, MsgID: p.Msgid, Delivery: p.Delivery, Error: p.Error,
			ErrorDetail: p.ErrorDetail, Signature: p.Signature, Signer: p.Signer}
		for _, r := range p.Recipients {
			out.PEC.Recipients = append(out.PEC.Recipients, PECRecipient{Address: r.Address, Type: r.Type})
		}
	}
	if u := e.Unsubscribe; u != nil {
		out.Unsubscribe = &Unsubscribe{Recipient: u.Recipient, Stream: u.Stream, Via: u.Via, At: parseTime(u.At)}
	}
	if b := e.BatchSuspension; b != nil {
		out.BatchSuspension = &BatchSuspension{Batch: b.Batch, Reason: b.Reason, Sent: b.Sent, Hard: b.Hard, Complaints: b.Complaints,
			MinSent: b.MinSent, MaxHardRate: b.MaxHardRate, MaxComplaintRate: b.MaxComplaintRate}
	}
	return out
}

// ToProto converts to the wire form.
func ToProto(e *Event) *pb.Event {
	out := &pb.Event{
		EventId: e.EventID, MessageId: e.MessageID, Rfc822MessageId: e.RFC822MessageID, Outcome: e.Outcome,
		PreviousStatus: e.PreviousStatus, Reason: e.Reason, At: e.At, Attempts: int32(e.Attempts), Sender: e.Sender,
		Batch: e.Batch, Priority: int32(e.Priority), Route: e.Route, DeliveryAttempt: int32(e.DeliveryAttempt), Stream: e.Stream,
	}
	for _, r := range e.Recipients {
		pr := &pb.Recipient{Address: r.Address, Status: r.Status, Verdict: string(r.Verdict), Code: int32(r.Code),
			EnhancedCode: r.EnhancedCode, Text: r.Text, Host: r.Host, At: formatTime(r.At)}
		if t := r.TLS; t != nil {
			pr.Tls = &pb.Tls{Policy: t.Policy, Version: t.Version, Cipher: t.Cipher, Verified: t.Verified}
		}
		out.Recipients = append(out.Recipients, pr)
	}
	if b := e.Bounce; b != nil {
		out.Bounce = &pb.Bounce{Kind: b.Kind, Type: b.Type, ReportingMta: b.ReportingMTA, ArrivalDate: b.ArrivalDate, MatchedBy: b.MatchedBy}
		for _, r := range b.Recipients {
			out.Bounce.Recipients = append(out.Bounce.Recipients, &pb.BounceRecipient{FinalRecipient: r.FinalRecipient,
				OriginalRecipient: r.OriginalRecipient, Action: r.Action, Status: r.Status, SmtpCode: int32(r.SMTPCode),
				Reason: r.Reason, Verdict: string(r.Verdict), NotRecipient: r.NotRecipient, RemoteMta: r.RemoteMTA, Diagnostic: r.Diagnostic})
		}
	}
	if p := e.PEC; p != nil {
		out.Pec = &pb.Pec{ReceiptType: p.ReceiptType, Transport: p.Transport, Source: p.Source, Sender: p.Sender, Subject: p.Subject,
			Issuer: p.Issuer, Date: p.Date, Identifier: p.Identifier, Msgid: p.MsgID, Delivery: p.Delivery, Error: p.Error,
			ErrorDetail: p.ErrorDetail, Signature: p.Signature, Signer: p.Signer}
		for _, r := range p.Recipients {
			out.Pec.Recipients = append(out.Pec.Recipients, &pb.PecRecipient{Address: r.Address, Type: r.Type})
		}
	}
	if u := e.Unsubscribe; u != nil {
		out.Unsubscribe = &pb.Unsubscribe{Recipient: u.Recipient, Stream: u.Stream, Via: u.Via, At: formatTime(u.At)}
	}
	if b := e.BatchSuspension; b != nil {
		out.BatchSuspension = &pb.BatchSuspension{Batch: b.Batch, Reason: b.Reason, Sent: b.Sent, Hard: b.Hard, Complaints: b.Complaints,
			MinSent: b.MinSent, MaxHardRate: b.MaxHardRate, MaxComplaintRate: b.MaxComplaintRate}
	}
	return out
}

// The wire carries times as RFC 3339 text, empty for none.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, s)
	return t
}
