package bounce

import "strings"

// Bounds on the text kept as a recipient's diagnostic, and on the text
// around it read to classify it: what explains a bounce is at its top.
const (
	maxDiagnostic = 1000
	maxContext    = 4000
)

// report tells what the message is, trying the readings from the most
// structured to the least: a forwarded bounce, a feedback report, a DSN, a
// provider's JSON notification, the text of a bounce, an auto-reply.
func (m *msg) report(opts Options) *Report {
	rep := &Report{Kind: KindNotBounce, MessageID: messageID(m.header.Get("Message-ID"))}
	rep.Keys.VERP = verpID(m.header, opts.BounceAddresses)
	if m.forwarded(rep, opts) {
		return rep
	}

	text := strings.Join(m.texts, "\n\n")
	bt := readBounceText(text, m.skipper(true))
	if len(bt.blocks) == 0 {
		// People send themselves test messages: the failed recipient
		// may be the bounce's own To.
		bt = readBounceText(text, m.skipper(false))
	}
	switch {
	case m.complaint(rep):
	case m.deliveryStatus(rep, bt):
	case m.notification(rep):
	case m.autoReply(rep, false):
	case m.textBounce(rep, bt):
	case m.autoReply(rep, true):
	}

	rep.Recipients = settleRecipients(rep.Recipients, text)
	returnedKeys(&rep.Keys, m.returned)
	quotedKeys(&rep.Keys, text, bt.returned)
	return rep
}

// maxNested bounds how deep bounces forwarded as attachments are read.
const maxNested = 2

// forwarded reads a bounce that comes attached to another message, as
// mail systems that forward their postmaster's mail send them: the
// attached bounce says what the outer one only repeats.
func (m *msg) forwarded(rep *Report, opts Options) bool {
	if m.inner == nil || m.nested >= maxNested || len(m.status) > 0 {
		return false
	}
	h := m.returned
	mediaType, params := contentType(h.Header)
	isReport := mediaType == "multipart/report" && strings.EqualFold(params["report-type"], "delivery-status")
	if !isReport && !(daemonFromRe.MatchString(h.Get("From")) && bounceSubjectRe.MatchString(headerText(h.Header, "Subject"))) {
		return false
	}
	inner, err := readMessage(m.inner)
	if err != nil {
		return false
	}
	inner.nested = m.nested + 1
	in := inner.report(opts)
	if (in.Kind != KindBounce && in.Kind != KindDelay) || len(in.Recipients) == 0 {
		return false
	}
	// The keys are the attached bounce's: the outer message only carries
	// it.
	rep.Kind, rep.Recipients = in.Kind, in.Recipients
	rep.ReportingMTA, rep.ArrivalDate = in.ReportingMTA, in.ArrivalDate
	rep.Keys = in.Keys
	return true
}

// skipper returns what tells addresses that cannot be a failed recipient:
// the bounce's own From, and unless all is false its To and the
// original's sender.
func (m *msg) skipper(all bool) func(string) bool {
	skip := map[string]bool{}
	add := func(v string) {
		for _, a := range headerAddresses(v) {
			skip[strings.ToLower(a)] = true
		}
	}
	add(m.header.Get("From"))
	if all {
		add(m.header.Get("To"))
	}
	if all && m.returned != nil {
		add(m.returned.Get("From"))
		add(m.returned.Get("Return-Path"))
	}
	return func(a string) bool { return skip[strings.ToLower(a)] }
}

// kindOf tells a report from its recipients: a bounce if any failed, a
// delay if none failed but some are delayed. A report of deliveries only
// (delivered, relayed, expanded: a success DSN asked for with NOTIFY=SUCCESS)
// is KindNotBounce: nothing went wrong, and the recipients say so.
func kindOf(rs []Recipient) Kind {
	kind := KindNotBounce
	for _, r := range rs {
		switch r.Action {
		case "failed":
			return KindBounce
		case "delayed":
			kind = KindDelay
		}
	}
	return kind
}
