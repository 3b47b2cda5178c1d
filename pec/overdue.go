package pec

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
// is noticed.
func (r *Recorder) CheckOverdue(ctx context.Context, now time.Time, l Limits, isPEC func(route string) bool) error {
	waitingAcceptance := []backends.Status{backends.StatusSent, backends.StatusCallingSent, backends.StatusSentAcknowledged}
	waitingDelivery := []backends.Status{backends.StatusPECAccepted, backends.StatusCallingPECAccepted, backends.StatusPECAcceptedAcknowledged}
	raised := 0
	for _, group := range []struct {
		statuses []backends.Status
		limit    time.Duration
		check    func(*backends.Message, []*backends.Event, time.Time) []*backends.Event
	}{{waitingAcceptance, l.Acceptance, acceptanceOverdue}, {waitingDelivery, l.Delivery, deliveryOverdue}} {
		for _, st := range group.statuses {
			// Every page: ordinary mail that stays SENT-ACKNOWLEDGED until
			// retention removes it shares the status with PEC mail.
			for after := ""; ; {
				msgs, next, err := r.store.List(ctx, backends.ListQuery{Status: st, After: after, Limit: overdueScan})
				if err != nil {
					return fmt.Errorf("list %s: %w", st, err)
				}
				for _, m := range msgs {
					if now.Sub(m.UpdatedAt) < group.limit || !isPEC(m.Route) {
						continue
					}
					n, err := r.raise(ctx, m, now.Add(-group.limit), group.check)
					if err != nil {
						return err
					}
					raised += n
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
	return nil
}

// raise records the overdue events check finds for m.
func (r *Recorder) raise(ctx context.Context, m *backends.Message, deadline time.Time,
	check func(*backends.Message, []*backends.Event, time.Time) []*backends.Event) (int, error) {
	events, err := r.store.Events(ctx, m.ID)
	if err != nil {
		return 0, fmt.Errorf("events of %s: %w", m.ID, err)
	}
	raised := 0
	for _, e := range check(m, events, deadline) {
		err := r.store.AddEvent(ctx, e)
		switch {
		case errors.Is(err, backends.ErrDuplicate), errors.Is(err, backends.ErrNotFound):
		case err != nil:
			return raised, fmt.Errorf("record %s of %s: %w", e.Outcome, m.ID, err)
		default:
			raised++
			r.metrics.overdue.WithLabelValues(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(e.Outcome, "PEC-"), "-OVERDUE"))).Inc()
			r.log.Warn("pec receipt overdue", "id", m.ID, "outcome", e.Outcome, "reason", e.Reason)
		}
	}
	return raised, nil
}

// acceptanceOverdue: SENT before the deadline, no acceptance receipt, and
// not said yet.
func acceptanceOverdue(m *backends.Message, events []*backends.Event, deadline time.Time) []*backends.Event {
	var sentAt time.Time
	for _, e := range events {
		switch e.Outcome {
		case string(backends.StatusSent):
			sentAt = e.At
		case OutcomeAccepted, OutcomeNotAccepted, OutcomeAcceptanceOverdue:
			return nil
		}
	}
	if sentAt.IsZero() || sentAt.After(deadline) {
		return nil
	}
	e := backends.OutcomeEvent(m.Status, OutcomeAcceptanceOverdue,
		fmt.Sprintf("no acceptance receipt since %s: look in the PEC mailbox, or ask the provider", sentAt.Format(time.RFC3339)), nil)
	e.ID = uuid.NewSHA1(eventNamespace, []byte(m.ID+"\x00acceptance-overdue")).String()
	e.MessageID = m.ID
	return []*backends.Event{e}
}

// deliveryOverdue: accepted before the deadline, and certified recipients
// with neither a delivery receipt nor a delivery error, not said yet.
func deliveryOverdue(m *backends.Message, events []*backends.Event, deadline time.Time) []*backends.Event {
	var acceptedAt time.Time
	expected, done := map[string]bool{}, map[string]bool{}
	anyOutcome := false
	for _, e := range events {
		var d eventPEC
		if len(e.Details) == 0 || json.Unmarshal(e.Details, &d) != nil {
			continue
		}
		switch e.Outcome {
		case OutcomeAccepted:
			acceptedAt = e.At
			for _, rc := range d.PEC.Recipients {
				if rc.Type != "esterno" {
					expected[strings.ToLower(rc.Address)] = true
				}
			}
		case OutcomeDelivered, OutcomeRecipientDelivered, OutcomeNotDelivered:
			anyOutcome = true
			done[strings.ToLower(d.PEC.Delivery)] = true
		case OutcomeDeliveryOverdue:
			done[strings.ToLower(d.PEC.Delivery)] = true
		}
	}
	if acceptedAt.IsZero() || acceptedAt.After(deadline) {
		return nil
	}
	if len(expected) == 0 && !anyOutcome {
		// The acceptance listed no recipients: the envelope's.
		for _, a := range m.Envelope.Recipients {
			expected[strings.ToLower(a)] = true
		}
	}
	var out []*backends.Event
	for a := range expected {
		if done[a] {
			continue
		}
		e := backends.OutcomeEvent(m.Status, OutcomeDeliveryOverdue,
			fmt.Sprintf("no delivery receipt for %s since the acceptance at %s", a, acceptedAt.Format(time.RFC3339)),
			map[string]any{"pec": map[string]string{"delivery": a}})
		e.ID = uuid.NewSHA1(eventNamespace, []byte(m.ID+"\x00delivery-overdue\x00"+a)).String()
		e.MessageID = m.ID
		out = append(out, e)
	}
	return out
}
