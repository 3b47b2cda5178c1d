package bounce

import (
	"encoding/json"
	"strings"
	"time"
)

// sesMessage is the part of an Amazon SES notification (SNS to e-mail, or
// event publishing) the reader uses.
type sesMessage struct {
	NotificationType string `json:"notificationType"`
	EventType        string `json:"eventType"`
	Bounce           *struct {
		BounceType        string `json:"bounceType"`
		ReportingMTA      string `json:"reportingMTA"`
		Timestamp         string `json:"timestamp"`
		BouncedRecipients []struct {
			EmailAddress   string `json:"emailAddress"`
			Action         string `json:"action"`
			Status         string `json:"status"`
			DiagnosticCode string `json:"diagnosticCode"`
		} `json:"bouncedRecipients"`
	} `json:"bounce"`
	Complaint *struct {
		ComplaintFeedbackType string `json:"complaintFeedbackType"`
		ComplainedRecipients  []struct {
			EmailAddress string `json:"emailAddress"`
		} `json:"complainedRecipients"`
	} `json:"complaint"`
	Delivery *struct {
		Recipients   []string `json:"recipients"`
		SMTPResponse string   `json:"smtpResponse"`
		ReportingMTA string   `json:"reportingMTA"`
	} `json:"delivery"`
	Mail struct {
		MessageID string `json:"messageId"`
		Headers   []struct {
			Name  string `json:"name"`
			Value string `json:"value"`
		} `json:"headers"`
	} `json:"mail"`
}

// notification reads an Amazon SES notification sent as mail.
func (m *msg) notification(rep *Report) bool {
	var n sesMessage
	found := false
	for _, t := range m.texts {
		t = strings.TrimSpace(t)
		if !strings.HasPrefix(t, "{") || !strings.Contains(t, "notificationType") && !strings.Contains(t, "eventType") {
			continue
		}
		// Mail systems break lines longer than 998 octets with "!" and a
		// folding newline; take the breaks out before reading the JSON.
		t = strings.ReplaceAll(t, "!\n ", "")
		if decodeSES(t, &n) {
			found = true
			break
		}
	}
	if !found {
		return false
	}
	kind := strings.ToLower(n.NotificationType + n.EventType)
	switch {
	case kind == "bounce" && n.Bounce != nil:
		rep.ReportingMTA = typedValue(n.Bounce.ReportingMTA)
		rep.ArrivalDate, _ = time.Parse(time.RFC3339, n.Bounce.Timestamp)
		for _, b := range n.Bounce.BouncedRecipients {
			r := Recipient{
				FinalRecipient: b.EmailAddress,
				Status:         findStatus(b.Status),
				Diagnostic:     typedValue(b.DiagnosticCode),
			}
			r.SMTPCode, _ = replyCodes(r.Diagnostic)
			if r.Status == "" {
				_, r.Status = replyCodes(r.Diagnostic)
			}
			r.Action = normAction(b.Action, r.Status)
			if strings.EqualFold(n.Bounce.BounceType, "Transient") && r.Action == "failed" && strings.HasPrefix(r.Status, "4.") {
				r.Action = "delayed"
			}
			r.assess("")
			rep.Recipients = append(rep.Recipients, r)
		}
		rep.Kind = kindOf(rep.Recipients)
	case kind == "complaint" && n.Complaint != nil:
		rep.Kind = KindComplaint
		rep.FeedbackType = strings.ToLower(n.Complaint.ComplaintFeedbackType)
		if rep.FeedbackType == "" {
			rep.FeedbackType = "abuse"
		}
		for _, c := range n.Complaint.ComplainedRecipients {
			rep.Recipients = append(rep.Recipients, Recipient{FinalRecipient: c.EmailAddress})
		}
	case kind == "delivery" && n.Delivery != nil:
		code, status := replyCodes(n.Delivery.SMTPResponse)
		rep.ReportingMTA = n.Delivery.ReportingMTA
		for _, a := range n.Delivery.Recipients {
			rep.Recipients = append(rep.Recipients, Recipient{
				FinalRecipient: a, Action: "delivered", Status: status, SMTPCode: code, Diagnostic: n.Delivery.SMTPResponse,
			})
		}
	default:
		return false
	}
	for _, h := range n.Mail.Headers {
		switch strings.ToLower(h.Name) {
		case strings.ToLower(mailIDHeader):
			rep.Keys.MailID = strings.Trim(strings.TrimSpace(h.Value), "<>")
		case "message-id":
			rep.Keys.MessageID = messageID(h.Value)
		}
	}
	return true
}

// decodeSES decodes a notification, which SNS may wrap in an envelope
// whose Message is the notification as a JSON string.
func decodeSES(s string, n *sesMessage) bool {
	var env struct {
		Type    string `json:"Type"`
		Message string `json:"Message"`
	}
	if json.Unmarshal([]byte(s), &env) == nil && env.Type == "Notification" && strings.HasPrefix(strings.TrimSpace(env.Message), "{") {
		s = env.Message
	}
	// Trailing text (an unsubscribe footer) follows the JSON in the mail.
	return json.NewDecoder(strings.NewReader(s)).Decode(n) == nil && n.NotificationType+n.EventType != ""
}
