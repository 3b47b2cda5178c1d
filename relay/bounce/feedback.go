package bounce

import (
	"regexp"
	"strings"
)

// complaint reads a feedback-loop report: ARF (RFC 5965), and the reports
// providers send without it.
func (m *msg) complaint(rep *Report) bool {
	switch {
	case m.feedback != "" || m.reportType == "feedback-report":
		m.arf(rep)
	case hotmailComplaintRe.MatchString(m.subject) && m.returned != nil && m.returned.Get("X-HmXmrOriginalRecipient") != "":
		// Outlook.com's JMRP: the reported message is attached, and the
		// complaining address is in its X-HmXmrOriginalRecipient.
		rep.FeedbackType = "abuse"
		for _, a := range headerAddresses(m.returned.Get("X-HmXmrOriginalRecipient")) {
			rep.Recipients = append(rep.Recipients, Recipient{FinalRecipient: a})
		}
	case strings.EqualFold(strings.TrimSpace(m.header.Get("X-Apple-Unsubscribe")), "true"):
		// Apple Mail's "unsubscribe" button sends a message from the
		// subscriber to the List-Unsubscribe address.
		rep.FeedbackType = "opt-out"
		for _, a := range headerAddresses(m.header.Get("From")) {
			rep.Recipients = append(rep.Recipients, Recipient{FinalRecipient: a})
		}
	default:
		return false
	}
	rep.Kind = KindComplaint
	return true
}

var hotmailComplaintRe = regexp.MustCompile(`(?i)complaint about message`)

// arf reads the machine-readable part of an ARF report.
func (m *msg) arf(rep *Report) {
	var fs fields
	for _, g := range readFields(m.feedback) {
		fs = append(fs, g...)
	}
	rep.FeedbackType = strings.ToLower(strings.TrimSpace(fs.get("Feedback-Type")))
	if rep.FeedbackType == "" {
		rep.FeedbackType = "abuse"
	}
	rep.ReportingMTA = typedValue(fs.get("Reporting-MTA"))
	if rep.ArrivalDate = parseDate(fs.get("Arrival-Date")); rep.ArrivalDate.IsZero() {
		rep.ArrivalDate = parseDate(fs.get("Received-Date"))
	}
	var addrs []string
	for _, name := range []string{"Original-Rcpt-To", "Removal-Recipient"} {
		for _, v := range fs.all(name) {
			addrs = append(addrs, headerAddresses(v)...)
		}
	}
	if len(addrs) == 0 && m.returned != nil {
		addrs = headerAddresses(m.returned.Get("To"))
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if k := strings.ToLower(a); !seen[k] {
			seen[k] = true
			rep.Recipients = append(rep.Recipients, Recipient{FinalRecipient: a})
		}
	}
}
