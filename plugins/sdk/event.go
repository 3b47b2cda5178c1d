package sdk

import (
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
	// Outcome is SENT, FAILED or INVALID; later BOUNCED, COMPLAINED,
	// DELAYED and the PEC outcomes.
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
	// DeliveryAttempt counts the tries of this event, from 1.
	DeliveryAttempt int `json:"delivery_attempt"`
}

// Recipient is what became of one envelope recipient.
type Recipient struct {
	Address      string `json:"address"`
	Status       string `json:"status"`
	Code         int    `json:"code,omitempty"`
	EnhancedCode string `json:"enhanced_code,omitempty"`
	Text         string `json:"text,omitempty"`
	Host         string `json:"host,omitempty"`
}

// Bounce is a delivery status notification or a complaint.
type Bounce struct {
	Kind         string            `json:"kind"`
	Type         string            `json:"type,omitempty"`
	ReportingMTA string            `json:"reporting_mta,omitempty"`
	ArrivalDate  string            `json:"arrival_date,omitempty"`
	Recipients   []BounceRecipient `json:"recipients,omitempty"`
	MatchedBy    string            `json:"matched_by,omitempty"`
}

type BounceRecipient struct {
	FinalRecipient    string `json:"final_recipient,omitempty"`
	OriginalRecipient string `json:"original_recipient,omitempty"`
	Action            string `json:"action,omitempty"`
	Status            string `json:"status,omitempty"`
	SMTPCode          int    `json:"smtp_code,omitempty"`
	Reason            string `json:"reason,omitempty"`
	RemoteMTA         string `json:"remote_mta,omitempty"`
	Diagnostic        string `json:"diagnostic,omitempty"`
}

// PEC is an Italian certified mail receipt.
type PEC struct {
	ReceiptType string         `json:"receipt_type"`
	Transport   string         `json:"transport,omitempty"`
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
	Signature   string         `json:"signature,omitempty"`
	Signer      string         `json:"signer,omitempty"`
}

type PECRecipient struct {
	Address string `json:"address"`
	Type    string `json:"type,omitempty"`
}

// FromProto converts the wire form.
func FromProto(e *pb.Event) *Event {
	out := &Event{
		EventID: e.EventId, MessageID: e.MessageId, RFC822MessageID: e.Rfc822MessageId, Outcome: e.Outcome,
		PreviousStatus: e.PreviousStatus, Reason: e.Reason, At: e.At, Attempts: int(e.Attempts), Sender: e.Sender,
		Batch: e.Batch, Priority: int(e.Priority), Route: e.Route, DeliveryAttempt: int(e.DeliveryAttempt),
		Recipients: make([]Recipient, len(e.Recipients)),
	}
	for i, r := range e.Recipients {
		out.Recipients[i] = Recipient{Address: r.Address, Status: r.Status, Code: int(r.Code), EnhancedCode: r.EnhancedCode, Text: r.Text, Host: r.Host}
	}
	if b := e.Bounce; b != nil {
		out.Bounce = &Bounce{Kind: b.Kind, Type: b.Type, ReportingMTA: b.ReportingMta, ArrivalDate: b.ArrivalDate, MatchedBy: b.MatchedBy}
		for _, r := range b.Recipients {
			out.Bounce.Recipients = append(out.Bounce.Recipients, BounceRecipient{FinalRecipient: r.FinalRecipient,
				OriginalRecipient: r.OriginalRecipient, Action: r.Action, Status: r.Status, SMTPCode: int(r.SmtpCode),
				Reason: r.Reason, RemoteMTA: r.RemoteMta, Diagnostic: r.Diagnostic})
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
	return out
}

// ToProto converts to the wire form.
func ToProto(e *Event) *pb.Event {
	out := &pb.Event{
		EventId: e.EventID, MessageId: e.MessageID, Rfc822MessageId: e.RFC822MessageID, Outcome: e.Outcome,
		PreviousStatus: e.PreviousStatus, Reason: e.Reason, At: e.At, Attempts: int32(e.Attempts), Sender: e.Sender,
		Batch: e.Batch, Priority: int32(e.Priority), Route: e.Route, DeliveryAttempt: int32(e.DeliveryAttempt),
	}
	for _, r := range e.Recipients {
		out.Recipients = append(out.Recipients, &pb.Recipient{Address: r.Address, Status: r.Status, Code: int32(r.Code),
			EnhancedCode: r.EnhancedCode, Text: r.Text, Host: r.Host})
	}
	if b := e.Bounce; b != nil {
		out.Bounce = &pb.Bounce{Kind: b.Kind, Type: b.Type, ReportingMta: b.ReportingMTA, ArrivalDate: b.ArrivalDate, MatchedBy: b.MatchedBy}
		for _, r := range b.Recipients {
			out.Bounce.Recipients = append(out.Bounce.Recipients, &pb.BounceRecipient{FinalRecipient: r.FinalRecipient,
				OriginalRecipient: r.OriginalRecipient, Action: r.Action, Status: r.Status, SmtpCode: int32(r.SMTPCode),
				Reason: r.Reason, RemoteMta: r.RemoteMTA, Diagnostic: r.Diagnostic})
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
	return out
}
