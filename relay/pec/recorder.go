package pec

import (
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
	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay/mailbox"
)

// Outcomes of PEC receipts. Those that are statuses move the message;
// the others are told to plugins and move nothing.
const (
	OutcomeAccepted    = string(backends.StatusPECAccepted)
	OutcomeNotAccepted = string(backends.StatusPECNotAccepted)
	// OutcomeDelivered comes with the delivery receipt that completes the
	// message: every certified recipient has one.
	OutcomeDelivered    = string(backends.StatusPECDelivered)
	OutcomeNotDelivered = string(backends.StatusPECNotDelivered)
	// OutcomeRecipientDelivered is a delivery receipt that does not
	// complete the message yet.
	OutcomeRecipientDelivered = "PEC-RECIPIENT-DELIVERED"
	OutcomeTakenInCharge      = "PEC-TAKEN-IN-CHARGE"
	OutcomeDeliveryWarning    = "PEC-DELIVERY-WARNING"
	OutcomeVirus              = "PEC-VIRUS-DETECTED"
	// OutcomeInvalidSignature is a receipt whose S/MIME signature does
	// not hold: kept and told, never taken for what it claims.
	OutcomeInvalidSignature = "PEC-RECEIPT-INVALID"
	// Raised by the relay when a receipt is late.
	OutcomeAcceptanceOverdue = "PEC-ACCEPTANCE-OVERDUE"
	OutcomeDeliveryOverdue   = "PEC-DELIVERY-OVERDUE"
)

// Store is what the recorder needs of the outbox.
type Store interface {
	Get(ctx context.Context, id string) (*backends.Message, error)
	ByMessageID(ctx context.Context, messageID string) ([]*backends.Message, error)
	Link(ctx context.Context, key, messageID string) error
	Linked(ctx context.Context, key string) (string, error)
	AddEvent(ctx context.Context, e *backends.Event) error
	Events(ctx context.Context, messageID string) ([]*backends.Event, error)
	SetAlarm(ctx context.Context, a backends.Alarm) error
	ClearAlarm(ctx context.Context, kind, messageID string) error
	DueAlarms(ctx context.Context, kind string, now time.Time, limit int) ([]backends.Alarm, error)
}

// Evidence keeps receipts with their message, whose bytes are at path; a
// name saved again keeps one copy. backends.ErrNotFound: the message is
// gone.
type Evidence interface {
	SaveReceipt(ctx context.Context, path, name string, raw []byte) error
}

// Recorder reads the messages of PEC mailboxes: each receipt is kept as
// evidence with the message it is about and becomes an event for plugins.
type Recorder struct {
	store    Store
	evidence Evidence
	opts     Options
	log      *slog.Logger
	metrics  *Metrics
	wake     func()
}

// NewRecorder makes a recorder; wake tells the callback stage that events
// wait.
func NewRecorder(store Store, evidence Evidence, opts Options, log *slog.Logger, m *Metrics, wake func()) *Recorder {
	return &Recorder{store: store, evidence: evidence, opts: opts, log: log, metrics: m, wake: wake}
}

// eventNamespace makes receipt event ids: a receipt read twice gets the
// same id, and the outbox keeps one.
var eventNamespace = uuid.MustParse("0b0f3e55-8a4e-4d0c-bf6e-2c8f7d5e9a31")

// linkKey is the outbox link of a provider's identificativo.
func linkKey(identificativo string) string { return "pec:" + identificativo }

// Handle reads one message of a PEC mailbox.
func (r *Recorder) Handle(ctx context.Context, raw []byte) (mailbox.Verdict, error) {
	rec, err := Parse(raw, r.opts)
	if err != nil {
		r.log.Warn("pec mailbox: unreadable message set aside", "error", err)
		return mailbox.Unmatched, nil
	}
	switch rec.Type {
	case "", PostaCertificata, ErroreTrasporto:
		// Mail to the account, not a receipt of what it sent.
		r.count(rec, "unmatched")
		return mailbox.Unmatched, nil
	}
	m, by, err := r.find(ctx, rec.Keys)
	if err != nil {
		return 0, err
	}
	if m == nil {
		r.log.Info("pec mailbox: receipt of no message the outbox holds, set aside", "type", rec.Type,
			"message_id", rec.Keys.MessageID, "identificativo", rec.Keys.Identificativo)
		r.count(rec, "unmatched")
		return mailbox.Unmatched, nil
	}
	if m.Status == backends.StatusProcessing {
		// The provider answered before the relay recorded SENT.
		return mailbox.Later, nil
	}
	// The first receipt found otherwise records the identificativo; one
	// found by it has nothing to add.
	// A receipt whose signature fails may be forged: it must not tie the
	// identificativo to a message for the receipts that follow.
	if id := rec.Keys.Identificativo; id != "" && by != "identificativo" && rec.Signature.Status != SignatureInvalid {
		if err := r.store.Link(ctx, linkKey(id), m.ID); err != nil && !errors.Is(err, backends.ErrNotFound) {
			return 0, fmt.Errorf("link identificativo %s to %s: %w", id, m.ID, err)
		}
	}
	name := receiptName(rec, raw)
	// A message removed meanwhile is told of below, by AddEvent.
	if err := r.evidence.SaveReceipt(ctx, m.EmlPath, name, raw); err != nil && !errors.Is(err, backends.ErrNotFound) {
		return 0, fmt.Errorf("keep receipt %s of %s: %w", name, m.ID, err)
	}
	e, err := r.event(ctx, m, rec, by, name, raw)
	if err != nil {
		return 0, err
	}
	switch err := r.store.AddEvent(ctx, e); {
	case errors.Is(err, backends.ErrDuplicate):
		// Read before: after a crash or a UIDVALIDITY change.
	case errors.Is(err, backends.ErrNotFound):
		r.log.Info("pec mailbox: the message was removed (retention) before its receipt came", "id", m.ID)
	case err != nil:
		return 0, fmt.Errorf("record %s of %s: %w", e.Outcome, m.ID, err)
	default:
		r.log.Info("pec receipt recorded", "id", m.ID, "outcome", e.Outcome, "type", rec.Type, "signature", rec.Signature.Status, "matched_by", by)
		if r.wake != nil {
			r.wake()
		}
	}
	// The receipt may start a deadline (the acceptance starts the
	// deliveries') or end the watch: the overdue check looks again now.
	err = r.store.SetAlarm(ctx, backends.Alarm{Kind: backends.AlarmPECReceipts, MessageID: m.ID, At: time.Now().UTC()})
	if err != nil && !errors.Is(err, backends.ErrNotFound) {
		return 0, fmt.Errorf("receipts alarm of %s: %w", m.ID, err)
	}
	r.count(rec, "processed")
	return mailbox.Processed, nil
}

func (r *Recorder) count(rec *Receipt, verdict string) {
	if r.metrics != nil {
		typ := string(rec.Type)
		if typ == "" {
			typ = "none"
		}
		r.metrics.receipts.WithLabelValues(typ, verdict).Inc()
	}
}

// find looks for the message a receipt is about: by the Message-ID it
// refers to, by the provider's identificativo, by the X-Genro-Mail-ID of
// the returned original.
func (r *Recorder) find(ctx context.Context, k Keys) (*backends.Message, string, error) {
	if k.MessageID != "" {
		ms, err := r.store.ByMessageID(ctx, k.MessageID)
		if err != nil {
			return nil, "", fmt.Errorf("look up Message-ID %s: %w", k.MessageID, err)
		}
		if len(ms) > 0 {
			return ms[len(ms)-1], "Message-ID", nil
		}
	}
	if k.Identificativo != "" {
		id, err := r.store.Linked(ctx, linkKey(k.Identificativo))
		switch {
		case err == nil:
			m, err := r.store.Get(ctx, id)
			if err == nil {
				return m, "identificativo", nil
			}
			if !errors.Is(err, backends.ErrNotFound) {
				return nil, "", err
			}
		case !errors.Is(err, backends.ErrNotFound):
			return nil, "", fmt.Errorf("look up identificativo %s: %w", k.Identificativo, err)
		}
	}
	if k.MailID != "" && backends.CheckID(k.MailID) == nil {
		m, err := r.store.Get(ctx, k.MailID)
		if err == nil {
			return m, "X-Genro-Mail-ID", nil
		}
		if !errors.Is(err, backends.ErrNotFound) {
			return nil, "", err
		}
	}
	return nil, "", nil
}

// receiptName is the evidence file of a receipt: its type and a digest,
// so that the same receipt read again lands on the same file. A receipt
// whose signature fails is kept apart: a forgery must not replace the
// genuine receipt it copies.
func receiptName(rec *Receipt, raw []byte) string {
	sum := sha256.Sum256([]byte(receiptKey(rec, raw)))
	prefix := ""
	if rec.Signature.Status == SignatureInvalid {
		prefix = "invalid-"
	}
	return fmt.Sprintf("%s%s-%s.eml", prefix, rec.Type, hex.EncodeToString(sum[:6]))
}

// receiptKey names a receipt across readings: its Message-ID, or its bytes
// when it has none.
func receiptKey(rec *Receipt, raw []byte) string {
	if rec.MessageID != "" {
		return rec.MessageID
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// fields are what plugins read of a receipt: the contract's PEC fields.
func fields(rec *Receipt) outcome.PEC {
	p := outcome.PEC{ReceiptType: string(rec.Type), Source: string(rec.Source), Signature: string(rec.Signature.Status), Signer: rec.Signature.Signer,
		MsgID: rec.Keys.MessageID, Identifier: rec.Keys.Identificativo, Subject: rec.Subject}
	if d := rec.Daticert; d != nil {
		p.Sender, p.Subject, p.Issuer, p.Delivery, p.Error, p.ErrorDetail = d.Mittente, d.Oggetto, d.GestoreEmittente, d.Consegna, d.Errore, d.ErroreEsteso
		if !d.Data.IsZero() {
			p.Date = d.Data.Format(time.RFC3339)
		}
		for _, rc := range d.Destinatari {
			p.Recipients = append(p.Recipients, outcome.PECRecipient{Address: rc.Address, Type: rc.Type})
		}
	}
	if p.Error == "nessuno" {
		p.Error = ""
	}
	return p
}

// event makes the receipt's event; a delivery receipt looks at the
// message's earlier events to tell whether it completes the delivery.
func (r *Recorder) event(ctx context.Context, m *backends.Message, rec *Receipt, by, name string, raw []byte) (*backends.Event, error) {
	p := fields(rec)
	outcome := map[Type]string{Accettazione: OutcomeAccepted, NonAccettazione: OutcomeNotAccepted, PresaInCarico: OutcomeTakenInCharge,
		PreavvisoErroreConsegna: OutcomeDeliveryWarning, RilevazioneVirus: OutcomeVirus, ErroreConsegna: OutcomeNotDelivered}[rec.Type]
	switch {
	case rec.Signature.Status == SignatureInvalid:
		outcome = OutcomeInvalidSignature
	case rec.Type == AvvenutaConsegna:
		done, err := r.completes(ctx, m, p)
		if err != nil {
			return nil, err
		}
		outcome = OutcomeRecipientDelivered
		if done {
			outcome = OutcomeDelivered
		}
	}
	reason := string(rec.Type)
	if p.Delivery != "" {
		reason += " for " + p.Delivery
	}
	if p.Issuer != "" {
		reason += " from " + p.Issuer
	}
	if p.Error != "" {
		reason += ": " + p.Error
		if p.ErrorDetail != "" {
			reason += " (" + p.ErrorDetail + ")"
		}
	}
	if rec.VerificaSicurezza != "" {
		reason += "; X-VerificaSicurezza: " + rec.VerificaSicurezza
	}
	if rec.TypeConflict != "" {
		reason += "; its header says " + string(rec.TypeConflict) + ", the signed daticert.xml " + string(rec.Type) + ", which was used"
	}
	if rec.MessageIDConflict != "" {
		reason += "; X-Riferimento-Message-ID <" + rec.MessageIDConflict + "> disagrees with the signed daticert.xml, whose msgid was used"
	}
	reason += "; signature " + string(rec.Signature.Status)
	if rec.Signature.Error != "" {
		reason += " (" + rec.Signature.Error + ")"
	}
	if t := rec.Signature.CertificateExpired; !t.IsZero() {
		reason += " when signed; the certificate expired " + t.UTC().Format(time.RFC3339)
	}
	details := map[string]any{"pec": p, "receipt": name, "matched_by": by}
	if w := rec.WrappedIn; w != nil {
		reason += "; " + w.String()
		details["wrapped_in"] = w
	}
	e := backends.OutcomeEvent(m.Status, backends.Status(outcome), reason, details)
	// Whether the signature held is in the id: a receipt first read as
	// invalid (a trust bundle not yet updated) and read again as valid is a
	// new event. The rest of the outcome is not: a delivery receipt read
	// again after a later one completed the delivery must stay the event it was.
	valid := "valid"
	if outcome == OutcomeInvalidSignature {
		valid = "invalid"
	}
	e.ID = uuid.NewSHA1(eventNamespace, []byte(m.ID+"\x00"+string(rec.Type)+"\x00"+valid+"\x00"+strings.ToLower(p.Delivery)+"\x00"+receiptKey(rec, raw))).String()
	e.MessageID = m.ID
	return e, nil
}

// completes tells whether the delivery receipt p makes every certified
// recipient of m delivered, with no delivery error on record.
func (r *Recorder) completes(ctx context.Context, m *backends.Message, p outcome.PEC) (bool, error) {
	events, err := r.store.Events(ctx, m.ID)
	if err != nil {
		return false, fmt.Errorf("events of %s: %w", m.ID, err)
	}
	s := readReceipts(events)
	if s.failed {
		return false, nil
	}
	if p.Delivery == "" {
		// No daticert: only a message to one recipient is known complete.
		return len(m.Envelope.Recipients) == 1, nil
	}
	s.note(p.Recipients)
	s.delivered[strings.ToLower(p.Delivery)] = true
	for _, a := range s.expected(m) {
		if !s.delivered[a] {
			return false, nil
		}
	}
	return true, nil
}

// Metrics count what the PEC mailboxes bring, and the late receipts.
type Metrics struct {
	receipts *prometheus.CounterVec
	overdue  *prometheus.CounterVec
}

// NewMetrics registers the series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		receipts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_pec_receipts_total", Help: "Messages read from PEC mailboxes, by receipt type and by whether they matched a message."},
			[]string{"type", "verdict"}),
		overdue: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "postino_pec_overdue_total", Help: "PEC messages whose acceptance, or a recipient's delivery outcome, did not come in time."},
			[]string{"receipt"}),
	}
	reg.MustRegister(m.receipts, m.overdue)
	return m
}
