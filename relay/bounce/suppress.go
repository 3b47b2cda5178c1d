package bounce

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/emersion/go-message"
	"github.com/emersion/go-message/mail"
	"github.com/emersion/go-message/textproto"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay/suppression"
)

// suppress adds the report's findings on m's recipients to the suppression
// list: a hard verdict suppresses the address for every stream, a
// complaint for m's stream. Addresses the message was not sent to (a
// list's, a postmaster's, a forwarding hop) add nothing. The address is
// written as the envelope has it, whose local part the list matches as is.
func (r *Recorder) suppress(ctx context.Context, m *backends.Message, rep *Report, raw []byte, first bool) error {
	if first {
		r.countBatch(m, rep)
	}
	f := r.cfg.Findings
	if f == nil {
		return nil
	}
	now := time.Now().UTC()
	ev := suppression.Evidence{MessageID: m.ID, ReportID: reportID(rep, raw)}
	if rep.Kind == KindComplaint {
		stream := f.StreamOf(m, "")
		for _, addr := range complainants(m, rep) {
			ev.Diagnostic = complaintReason(rep)
			if _, err := f.Complaint(ctx, stream, addr, ev, now); err != nil {
				return fmt.Errorf("suppress the complaint of %s: %w", addr, err)
			}
		}
		return nil
	}
	for _, rc := range rep.Recipients {
		addr, ok := enveloped(m, rc.Address())
		if !ok || rc.Verdict != outcome.VerdictHard || rc.Action != "" && rc.Action != "failed" {
			continue
		}
		ev.Code = strings.TrimSpace(codeOf(rc) + " " + rc.Status)
		ev.Diagnostic = rc.Diagnostic
		if _, err := f.Hard(ctx, addr, ev, now); err != nil {
			return fmt.Errorf("suppress %s: %w", addr, err)
		}
	}
	return nil
}

// countBatch counts, for the brake, the report's complaint or hard
// verdicts on the message's recipients, once per report.
func (r *Recorder) countBatch(m *backends.Message, rep *Report) {
	if r.cfg.Brake == nil || m.Batch == "" {
		return
	}
	var t backends.BatchTally
	if rep.Kind == KindComplaint {
		t.Complaints = 1
	}
	for _, rc := range rep.Recipients {
		if _, ok := enveloped(m, rc.Address()); ok && rep.Kind != KindComplaint && rc.Verdict == outcome.VerdictHard {
			// Accepted upstream, it was counted sent: it is tried once.
			t.Hard++
			t.Sent--
		}
	}
	r.cfg.Brake.Count(m.Batch, m.ID, t)
}

func codeOf(rc Recipient) string {
	if rc.SMTPCode == 0 {
		return ""
	}
	return strconv.Itoa(rc.SMTPCode)
}

// complainants are the recipients of m a complaint is from: those it
// names that m was sent to, or m's only recipient when it names none
// (many feedback loops redact the address).
func complainants(m *backends.Message, rep *Report) []string {
	var out []string
	for _, rc := range rep.Recipients {
		if addr, ok := enveloped(m, rc.Address()); ok {
			out = append(out, addr)
		}
	}
	if len(rep.Recipients) == 0 && len(m.Envelope.Recipients) == 1 {
		out = append(out, m.Envelope.Recipients[0])
	}
	return out
}

// enveloped returns m's envelope recipient that addr names, in the
// envelope's spelling.
func enveloped(m *backends.Message, addr string) (string, bool) {
	for _, a := range m.Envelope.Recipients {
		if strings.EqualFold(a, addr) {
			return a, true
		}
	}
	return "", false
}

// unsubscribe honours a mailto: unsubscribe: a message whose subject
// carries a token the relay signed. done is false for any other message,
// which is then read as a report.
func (r *Recorder) unsubscribe(ctx context.Context, raw []byte) (done bool, err error) {
	u := r.cfg.Unsubscribes
	if u == nil {
		return false, nil
	}
	subject := headerSubject(raw)
	if subject == "" {
		return false, nil
	}
	ok, err := u.FromMail(ctx, subject)
	if err != nil {
		return false, fmt.Errorf("honour the unsubscribe by mail: %w", err)
	}
	if ok {
		r.cfg.Log.Info("bounce mailbox: unsubscribe by mail honoured")
	}
	return ok, nil
}

// headerSubject is the decoded Subject of a message; "" when its header
// cannot be read.
func headerSubject(raw []byte) string {
	h, err := textproto.ReadHeader(bufio.NewReader(bytes.NewReader(raw)))
	if err != nil {
		return ""
	}
	mh := mail.Header{Header: message.Header{Header: h}}
	s, err := mh.Subject()
	if err != nil {
		return h.Get("Subject")
	}
	return s
}
