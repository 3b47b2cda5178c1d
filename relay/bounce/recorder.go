package bounce

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/text"
	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay/mailbox"
	"github.com/genropy/postino/relay/suppression"
)

// Store is what the recorder needs of the outbox.
type Store interface {
	Get(ctx context.Context, id string) (*backends.Message, error)
	ByMessageID(ctx context.Context, messageID string) ([]*backends.Message, error)
	AddEvent(ctx context.Context, e *backends.Event) error
}

// Findings adds what reports say of addresses to the suppression list
// (suppression.Policy).
type Findings interface {
	// StreamOf is m's stream.
	StreamOf(m *backends.Message, route string) string
	// Hard records a hard verdict on addr.
	Hard(ctx context.Context, addr string, ev suppression.Evidence, now time.Time) (backends.Suppression, error)
	// Complaint records addr's complaint about a message of stream.
	Complaint(ctx context.Context, stream, addr string, ev suppression.Evidence, now time.Time) (backends.Suppression, error)
}

// MailUnsubscribes honours the unsubscribes that come by mail (the
// mailto: of List-Unsubscribe), which reach the bounce mailbox.
type MailUnsubscribes interface {
	// FromMail honours the unsubscribe a subject carries; ok is false
	// when it carries none that verifies.
	FromMail(ctx context.Context, subject string) (ok bool, err error)
}

// RecorderConfig is what a recorder works with.
type RecorderConfig struct {
	Options Options
	Log     *slog.Logger
	// Metrics may be nil.
	Metrics *Metrics
	// Wake tells the callback stage that events wait; may be nil.
	Wake func()
	// Findings, when set, takes the hard verdicts and complaints;
	// Unsubscribes, when set, the unsubscribes by mail.
	Findings     Findings
	Unsubscribes MailUnsubscribes
	// Brake, when set, counts the hard verdicts and complaints of batches'
	// messages.
	Brake Brake
}

// Brake counts the findings on batches' messages (brake.Brake).
type Brake interface {
	Count(batch, messageID string, t backends.BatchTally)
}

// Recorder reads the messages of a bounce mailbox and records, on the
// message each is about, a BOUNCED event per failed recipient, a DELAYED
// notice per delayed one, and a COMPLAINED notice per complaint; it adds
// the hard verdicts and the complaints to the suppression list.
type Recorder struct {
	store Store
	cfg   RecorderConfig
}

// NewRecorder makes a recorder.
func NewRecorder(store Store, cfg RecorderConfig) *Recorder {
	return &Recorder{store: store, cfg: cfg}
}

// eventNamespace makes the ids of bounce events: the same bounce read
// twice (a crash before it was moved, a UIDVALIDITY change) gets the same
// id, and the outbox keeps one.
var eventNamespace = uuid.MustParse("6f1d2a8e-5b7c-4c1e-9a43-8e2f0b9d7c15")

// Handle reads one message of the mailbox.
func (r *Recorder) Handle(ctx context.Context, raw []byte) (mailbox.Verdict, error) {
	if done, err := r.unsubscribe(ctx, raw); done || err != nil {
		return mailbox.Processed, err
	}
	rep, err := Parse(bytes.NewReader(raw), r.cfg.Options)
	if err != nil {
		r.cfg.Log.Warn("bounce mailbox: unreadable message set aside", "error", err)
		return mailbox.Unmatched, nil
	}
	switch rep.Kind {
	case KindBounce, KindDelay, KindComplaint:
	default:
		r.cfg.Log.Info("bounce mailbox: not a bounce, set aside", "kind", rep.Kind, "message_id", rep.MessageID)
		r.count(rep.Kind, "unmatched")
		return mailbox.Unmatched, nil
	}
	m, by, err := r.find(ctx, rep.Keys)
	if err != nil {
		return 0, err
	}
	if m == nil {
		r.cfg.Log.Info("bounce mailbox: about no message the outbox holds, set aside", "kind", rep.Kind,
			"mail_id", rep.Keys.MailID, "verp", rep.Keys.VERP, "message_id", rep.Keys.MessageID, "envid", rep.Keys.EnvID)
		r.count(rep.Kind, "unmatched")
		return mailbox.Unmatched, nil
	}
	events := r.events(m, rep, by, raw)
	if len(events) == 0 {
		r.cfg.Log.Info("bounce mailbox: names no failed or delayed recipient, set aside", "kind", rep.Kind,
			"id", m.ID, "matched_by", by, "message_id", rep.MessageID)
		r.count(rep.Kind, "unmatched")
		return mailbox.Unmatched, nil
	}
	added, again := 0, 0
	for _, e := range events {
		e.MessageID = m.ID
		err := r.store.AddEvent(ctx, e)
		switch {
		case errors.Is(err, backends.ErrDuplicate):
			// Recorded before: read again after a crash or a UIDVALIDITY change.
			again++
		case errors.Is(err, backends.ErrNotFound):
			r.cfg.Log.Info("bounce mailbox: the message was removed (retention) before its bounce came", "id", m.ID)
		case err != nil:
			return 0, fmt.Errorf("record %s of %s: %w", e.Outcome, m.ID, err)
		default:
			added++
			r.cfg.Log.Info("bounce recorded", "id", m.ID, "outcome", e.Outcome, "reason", e.Reason, "matched_by", by)
		}
	}
	// The verdict says what the report added, so that the series counts
	// each bounce once however often it is read.
	switch {
	case added > 0:
		r.count(rep.Kind, "processed")
	case again > 0:
		r.count(rep.Kind, "duplicate")
	default:
		r.count(rep.Kind, "unmatched") // its message was removed
	}
	if added > 0 || again > 0 {
		// Read again too: a finding that failed to be written is written
		// now; the list counts one strike per report (SuppressionChange.Apply).
		if err := r.suppress(ctx, m, rep, raw, added > 0); err != nil {
			return 0, err
		}
	}
	if added > 0 && r.cfg.Wake != nil {
		r.cfg.Wake()
	}
	return mailbox.Processed, nil
}

func (r *Recorder) count(k Kind, verdict string) {
	if r.cfg.Metrics != nil {
		r.cfg.Metrics.reports.WithLabelValues(string(k), verdict).Inc()
	}
}

// find looks for the message the report is about, by each key in turn.
func (r *Recorder) find(ctx context.Context, k Keys) (*backends.Message, string, error) {
	for _, c := range []struct{ by, id string }{{"X-Genro-Mail-ID", k.MailID}, {"VERP", k.VERP}} {
		if c.id == "" || backends.CheckID(c.id) != nil {
			continue
		}
		m, err := r.store.Get(ctx, c.id)
		if err == nil {
			return m, c.by, nil
		}
		if !errors.Is(err, backends.ErrNotFound) {
			return nil, "", fmt.Errorf("look up %s: %w", c.id, err)
		}
	}
	if k.MessageID != "" {
		ms, err := r.store.ByMessageID(ctx, k.MessageID)
		if err != nil {
			return nil, "", fmt.Errorf("look up Message-ID %s: %w", k.MessageID, err)
		}
		if len(ms) > 0 {
			// The newest: an app that reuses a Message-ID bounces its latest.
			return ms[len(ms)-1], "Message-ID", nil
		}
	}
	if k.EnvID != "" && backends.CheckID(k.EnvID) == nil {
		m, err := r.store.Get(ctx, k.EnvID)
		if err == nil {
			return m, "ENVID", nil
		}
		if !errors.Is(err, backends.ErrNotFound) {
			return nil, "", fmt.Errorf("look up %s: %w", k.EnvID, err)
		}
	}
	return nil, "", nil
}

// events makes the report's events on m: one per failed or delayed
// recipient, one per complaint.
func (r *Recorder) events(m *backends.Message, rep *Report, by string, raw []byte) []*backends.Event {
	reportID := reportID(rep, raw)
	sentTo := envelope(m)
	// The details are the plugin contract's bounce, by its JSON names.
	detail := func(kind string, rcpts ...Recipient) map[string]any {
		b := outcome.Bounce{Kind: kind, ReportingMTA: rep.ReportingMTA, MatchedBy: by}
		if !rep.ArrivalDate.IsZero() {
			b.ArrivalDate = rep.ArrivalDate.UTC().Format(time.RFC3339)
		}
		if kind != "complaint" {
			b.Type = string(outcome.VerdictSoft)
		}
		for _, rc := range rcpts {
			br := outcome.BounceRecipient{FinalRecipient: rc.FinalRecipient, OriginalRecipient: rc.OriginalRecipient,
				Action: rc.Action, Status: rc.Status, SMTPCode: rc.SMTPCode, Reason: string(rc.Reason), Verdict: rc.Verdict,
				RemoteMTA: rc.RemoteMTA, Diagnostic: rc.Diagnostic}
			if !sentTo.has(rc) {
				br.Verdict, br.NotRecipient = "", true
			}
			if br.Verdict == outcome.VerdictHard {
				b.Type = string(outcome.VerdictHard)
			}
			b.Recipients = append(b.Recipients, br)
		}
		return map[string]any{"bounce": b}
	}
	var out []*backends.Event
	if rep.Kind == KindComplaint {
		e := backends.OutcomeEvent(m.Status, "COMPLAINED", complaintReason(rep), detail("complaint", rep.Recipients...))
		e.ID = uuid.NewSHA1(eventNamespace, []byte(m.ID+"\x00complaint\x00"+reportID)).String()
		return append(out, e)
	}
	for _, rc := range rep.Recipients {
		// The event's id is keyed on the final recipient, as it was before
		// reports gave the app's address: a report read again, or a second
		// report on the same recipient with or without Original-Recipient,
		// is the same event, not a second one for the plugins.
		addr := strings.ToLower(cmp.Or(rc.FinalRecipient, rc.Address()))
		switch {
		case rc.Action == "delayed" || rep.Kind == KindDelay && rc.Action == "":
			rc.Verdict = outcome.VerdictSoft
			e := backends.OutcomeEvent(m.Status, "DELAYED", recipientReason(rc, sentTo.has(rc)), detail("delay", rc))
			e.ID = uuid.NewSHA1(eventNamespace, []byte(m.ID+"\x00delay\x00"+addr+"\x00"+reportID)).String()
			out = append(out, e)
		case rc.Action == "" || rc.Action == "failed":
			e := backends.OutcomeEvent(m.Status, backends.StatusBounced, recipientReason(rc, sentTo.has(rc)), detail("bounce", rc))
			e.ID = uuid.NewSHA1(eventNamespace, []byte(m.ID+"\x00bounce\x00"+addr)).String()
			out = append(out, e)
		}
		// delivered, relayed, expanded: not failures.
	}
	return out
}

// reportID names a report: its Message-ID, or a digest of its bytes.
func reportID(rep *Report, raw []byte) string {
	if rep.MessageID != "" {
		return rep.MessageID
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// addresses is a set of addresses, in lower case.
type addresses map[string]bool

// envelope is the set of m's envelope recipients.
func envelope(m *backends.Message) addresses {
	set := addresses{}
	for _, a := range m.Envelope.Recipients {
		set[strings.ToLower(a)] = true
	}
	return set
}

// has reports whether the report's recipient is one the message was sent
// to: the address the report says the app sent to (its original
// recipient, else its final one) is in the envelope. Any other address a
// bounce names (a list's own, a postmaster, the next hop of a forward)
// says nothing of the message's recipients.
func (set addresses) has(rc Recipient) bool {
	return set[strings.ToLower(rc.Address())]
}

// recipientReason is the event's reason: who (the address the app sent
// to), the codes unless the reply already says them, the reply, and the
// verdict, or that the address is not the message's.
func recipientReason(rc Recipient, sentTo bool) string {
	var b strings.Builder
	b.WriteString(rc.Address())
	b.WriteString(":")
	code, status := replyCodes(rc.Diagnostic)
	if rc.SMTPCode != 0 && code != rc.SMTPCode {
		fmt.Fprintf(&b, " %d", rc.SMTPCode)
	}
	if rc.Status != "" && status != rc.Status && findStatus(rc.Diagnostic) != rc.Status {
		b.WriteString(" " + rc.Status)
	}
	if rc.Diagnostic != "" {
		d := text.Cut(rc.Diagnostic, 200)
		if d != rc.Diagnostic {
			d += "…"
		}
		b.WriteString(" " + d)
	}
	switch {
	case !sentTo:
		fmt.Fprintf(&b, " (not a recipient of the message, %s)", rc.Reason)
	case rc.Verdict != "" || rc.Reason != "":
		fmt.Fprintf(&b, " (%s, %s)", rc.Verdict, rc.Reason)
	}
	return b.String()
}

func complaintReason(rep *Report) string {
	who := make([]string, 0, len(rep.Recipients))
	for _, rc := range rep.Recipients {
		who = append(who, rc.Address())
	}
	s := "complaint"
	if rep.FeedbackType != "" {
		s += " (" + rep.FeedbackType + ")"
	}
	if len(who) > 0 {
		s += " from " + strings.Join(who, ", ")
	}
	return s
}

// Metrics count what the bounce mailboxes bring.
type Metrics struct {
	reports *prometheus.CounterVec
}

// NewMetrics registers the series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{reports: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "postino_bounce_reports_total", Help: "Messages read from bounce mailboxes, by kind and by verdict: processed (recorded against a message), duplicate (recorded before), unmatched."},
		[]string{"kind", "verdict"})}
	reg.MustRegister(m.reports)
	return m
}
