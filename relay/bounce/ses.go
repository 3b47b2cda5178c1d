package bounce

import (
	"encoding/json"
	"strings"
	"time"
)

// sesMessage is the part of an Amazon SES notification (SNS to e-mail, or
// event publishing) the reader uses.
type sesMessage struct {
	NotificationType string        `json:"notificationType"`
	EventType        string        `json:"eventType"`
	Bounce           *sesBounce    `json:"bounce"`
	Complaint        *sesComplaint `json:"complaint"`
	Delivery         *sesDelivery  `json:"delivery"`
	Mail             sesMail       `json:"mail"`
}

// sesBounce is the bounce object of a notification.
type sesBounce struct {
	BounceType        string `json:"bounceType"`
	ReportingMTA      string `json:"reportingMTA"`
	Timestamp         string `json:"timestamp"`
	BouncedRecipients []struct {
		EmailAddress   string `json:"emailAddress"`
		Action         string `json:"action"`
		Status         string `json:"status"`
		DiagnosticCode string `json:"diagnosticCode"`
	} `json:"bouncedRecipients"`
}

// sesComplaint is the complaint object of a notification.
type sesComplaint struct {
	ComplaintFeedbackType string `json:"complaintFeedbackType"`
	ComplainedRecipients  []struct {
		EmailAddress string `json:"emailAddress"`
	} `json:"complainedRecipients"`
}

// sesDelivery is the delivery object of a notification.
type sesDelivery struct {
	Recipients   []string `json:"recipients"`
	SMTPResponse string   `json:"smtpResponse"`
	ReportingMTA string   `json:"reportingMTA"`
}

// sesMail is the mail object of a notification: the message it is about.
type sesMail struct {
	MessageID string `json:"messageId"`
	Headers   []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"headers"`
}

// notification reads an Amazon SES notification sent as mail.
func (m *msg) notification(rep *Report) bool {
	n, ok := m.sesNotification()
	if !ok {
		return false
	}
	switch kind := strings.ToLower(n.NotificationType + n.EventType); {
	case kind == "bounce" && n.Bounce != nil:
		n.Bounce.read(rep)
	case kind == "complaint" && n.Complaint != nil:
		n.Complaint.read(rep)
	case kind == "delivery" && n.Delivery != nil:
		n.Delivery.read(rep)
	default:
		return false
	}
	n.Mail.readKeys(&rep.Keys)
	return true
}

// sesNotification finds the notification among the texts of the message.
func (m *msg) sesNotification() (sesMessage, bool) {
	// The candidates decode into one value: a text that decodes only in
	// part leaves its fields to the next, as it always has.
	var n sesMessage
	for _, t := range m.texts {
		t = strings.TrimSpace(t)
		if !strings.HasPrefix(t, "{") || !strings.Contains(t, "notificationType") && !strings.Contains(t, "eventType") {
			continue
		}
		// Mail systems break lines longer than 998 octets with "!" and a
		// folding newline; take the breaks out before reading the JSON.
		t = strings.ReplaceAll(t, "!\n ", "")
		if decodeSES(t, &n) {
			return n, true
		}
	}
	return n, false
}

// read fills rep with the bounced recipients. A transient bounce that
// carries a transient code is a delay.
func (b *sesBounce) read(rep *Report) {
	rep.ReportingMTA = typedValue(b.ReportingMTA)
	rep.ArrivalDate, _ = time.Parse(time.RFC3339, b.Timestamp)
	transient := strings.EqualFold(b.BounceType, "Transient")
	for _, br := range b.BouncedRecipients {
		r := Recipient{
			FinalRecipient: br.EmailAddress,
			Status:         findStatus(br.Status),
			Diagnostic:     typedValue(br.DiagnosticCode),
		}
		r.SMTPCode, _ = replyCodes(r.Diagnostic)
		if r.Status == "" {
			_, r.Status = replyCodes(r.Diagnostic)
		}
		r.Action = normAction(br.Action, r.Status)
		if transient && r.Action == "failed" && strings.HasPrefix(r.Status, "4.") {
			r.Action = "delayed"
		}
		r.assess("", "")
		rep.Recipients = append(rep.Recipients, r)
	}
	rep.Kind = kindOf(rep.Recipients)
}

// read fills rep with the complaining recipients.
func (c *sesComplaint) read(rep *Report) {
	rep.Kind = KindComplaint
	rep.FeedbackType = strings.ToLower(c.ComplaintFeedbackType)
	if rep.FeedbackType == "" {
		rep.FeedbackType = "abuse"
	}
	for _, cr := range c.ComplainedRecipients {
		rep.Recipients = append(rep.Recipients, Recipient{FinalRecipient: cr.EmailAddress})
	}
}

// read fills rep with the recipients delivered to, each with the one
// reply the receiver gave.
func (d *sesDelivery) read(rep *Report) {
	code, status := replyCodes(d.SMTPResponse)
	rep.ReportingMTA = d.ReportingMTA
	for _, a := range d.Recipients {
		rep.Recipients = append(rep.Recipients, Recipient{
			FinalRecipient: a, Action: "delivered", Status: status, SMTPCode: code, Diagnostic: d.SMTPResponse,
		})
	}
}

// readKeys takes the keys from the headers of the message the
// notification is about.
func (ml *sesMail) readKeys(k *Keys) {
	for _, h := range ml.Headers {
		switch strings.ToLower(h.Name) {
		case strings.ToLower(mailIDHeader):
			k.MailID = strings.Trim(strings.TrimSpace(h.Value), "<>")
		case "message-id":
			k.MessageID = messageID(h.Value)
		}
	}
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
