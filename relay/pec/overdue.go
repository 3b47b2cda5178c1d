package pec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/genropy/postino/backends"
)

// Limits are how long receipts may take before the relay says so.
type Limits struct {
	// Acceptance runs from SENT to the acceptance (or non-acceptance).
	Acceptance time.Duration
	// Delivery runs from the acceptance to each certified recipient's
	// delivery receipt or delivery error.
	Delivery time.Duration
}

// overdueScan is the page size of a check.
const overdueScan = 1000

// CheckOverdue raises, once each, an event for every PEC message (a
// message whose route is in routes) whose acceptance is late, and for
// every recipient whose delivery outcome is late, so that a lost receipt
// is noticed. A message it cannot look at is reported in the error and
// does not keep it from the others.
func (r *Recorder) CheckOverdue(ctx context.Context, now time.Time, l Limits, isPEC func(route string) bool) error {
	waitingAcceptance := []backends.Status{backends.StatusSent, backends.StatusCallingSent, backends.StatusSentAcknowledged}
	waitingDelivery := []backends.Status{backends.StatusPECAccepted, backends.StatusCallingPECAccepted, backends.StatusPECAcceptedAcknowledged}
	raised := 0
	var errs []error
	for _, group := range []struct {
		label    string // of postino_pec_overdue_total
		statuses []backends.Status
		limit    time.Duration
		check    func(*backends.Message, *receipts, time.Time) []*backends.Event
	}{{"acceptance", waitingAcceptance, l.Acceptance, acceptanceOverdue}, {"delivery", waitingDelivery, l.Delivery, deliveryOverdue}} {
		for _, st := range group.statuses {
			// Every page: ordinary mail that stays SENT-ACKNOWLEDGED until
			// retention removes it shares the status with PEC mail.
			for after := ""; ; {
				msgs, next, err := r.store.List(ctx, backends.ListQuery{Status: st, After: after, Limit: overdueScan})
				if err != nil {
					// The events raised so far must still be handed on.
					errs = append(errs, fmt.Errorf("list %s: %w", st, err))
					break
				}
				for _, m := range msgs {
					if now.Sub(m.UpdatedAt) < group.limit || !isPEC(m.Route) {
						continue
					}
					n, err := r.raise(ctx, m, group.label, now.Add(-group.limit), group.check)
					raised += n
					if err != nil {
						errs = append(errs, err)
					}
				}
				if next == "" {
					break
				}
				after = next
			}
		}
	}
	if raised > 0 && r.wake != nil {
		r.wake()
	}
	return errors.Join(errs...)
}

// raise records the overdue events check finds for m. A message removed
// since it was listed has nothing to say.
func (r *Recorder) raise(ctx context.Context, m *backends.Message, label string, deadline time.Time,
	check func(*backends.Message, *receipts, time.Time) []*backends.Event) (int, error) {
	events, err := r.store.Events(ctx, m.ID)
	if errors.Is(err, backends.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("events of %s: %w", m.ID, err)
	}
	raised := 0
	for _, e := range check(m, readReceipts(events), deadline) {
		err := r.store.AddEvent(ctx, e)
		switch {
		case errors.Is(err, backends.ErrDuplicate), errors.Is(err, backends.ErrNotFound):
		case err != nil:
			return raised, fmt.Errorf("record %s of %s: %w", e.Outcome, m.ID, err)
		default:
			raised++
			r.metrics.overdue.WithLabelValues(label).Inc()
			r.log.Warn("pec receipt overdue", "id", m.ID, "outcome", e.Outcome, "reason", e.Reason)
		}
	}
	return raised, nil
}

// acceptanceOverdue: SENT before the deadline, no acceptance receipt, and
// not said yet.
func acceptanceOverdue(m *backends.Message, s *receipts, deadline time.Time) []*backends.Event {
	if s.acceptance || s.sentAt.IsZero() || s.sentAt.After(deadline) {
		return nil
	}
	e := backends.OutcomeEvent(m.Status, OutcomeAcceptanceOverdue,
		fmt.Sprintf("no acceptance receipt since %s: look in the PEC mailbox, or ask the provider", s.sentAt.Format(time.RFC3339)), nil)
	e.ID = uuid.NewSHA1(eventNamespace, []byte(m.ID+"\x00acceptance-overdue")).String()
	e.MessageID = m.ID
	return []*backends.Event{e}
}

// deliveryOverdue: accepted before the deadline, and certified recipients
// with neither a delivery receipt nor a delivery error, not said yet.
func deliveryOverdue(m *backends.Message, s *receipts, deadline time.Time) []*backends.Event {
	if s.acceptedAt.IsZero() || s.acceptedAt.After(deadline) {
		return nil
	}
	var out []*backends.Event
	for _, a := range s.expected(m) {
		if s.settled[a] {
			continue
		}
		e := backends.OutcomeEvent(m.Status, OutcomeDeliveryOverdue,
			fmt.Sprintf("no delivery receipt for %s since the acceptance at %s", a, s.acceptedAt.Format(time.RFC3339)),
			map[string]any{"pec": map[string]string{"delivery": a}})
		e.ID = uuid.NewSHA1(eventNamespace, []byte(m.ID+"\x00delivery-overdue\x00"+a)).String()
		e.MessageID = m.ID
		out = append(out, e)
	}
	return out
}
