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

// CheckOverdue raises, once each, an event for every PEC message whose
// acceptance is late, and for every recipient whose delivery outcome is
// late, so that a lost receipt is noticed. It reads only the messages whose
// receipts alarm (backends.AlarmPECReceipts, set when the message was SENT)
// is due, and moves or clears each alarm as the receipts say. A message it
// cannot look at is reported in the error and does not keep it from the
// others.
func (r *Recorder) CheckOverdue(ctx context.Context, now time.Time, l Limits) error {
	raised := 0
	var errs []error
	for {
		alarms, err := r.store.DueAlarms(ctx, backends.AlarmPECReceipts, now, overdueScan)
		if err != nil {
			errs = append(errs, fmt.Errorf("due receipt alarms: %w", err))
			break
		}
		failed := false
		for _, a := range alarms {
			n, err := r.check(ctx, a.MessageID, now, l)
			raised += n
			if err != nil {
				errs = append(errs, err)
				failed = true
			}
		}
		// A page with an alarm left due would come back the same: the next
		// check tries again.
		if len(alarms) < overdueScan || failed {
			break
		}
	}
	if raised > 0 && r.wake != nil {
		r.wake()
	}
	return errors.Join(errs...)
}

// check raises what is late of message id's receipts, then moves its alarm
// to when they must be looked at again, or clears it.
func (r *Recorder) check(ctx context.Context, id string, now time.Time, l Limits) (int, error) {
	m, err := r.store.Get(ctx, id)
	if errors.Is(err, backends.ErrNotFound) {
		return 0, nil // its alarm went with it
	}
	if err != nil {
		return 0, fmt.Errorf("message %s: %w", id, err)
	}
	raised := 0
	for _, c := range []struct {
		label string // of postino_pec_overdue_total
		limit time.Duration
		check func(*backends.Message, *receipts, time.Time) []*backends.Event
	}{{"acceptance", l.Acceptance, acceptanceOverdue}, {"delivery", l.Delivery, deliveryOverdue}} {
		n, err := r.raise(ctx, m, c.label, now.Add(-c.limit), c.check)
		raised += n
		if err != nil {
			return raised, err
		}
	}
	events, err := r.store.Events(ctx, id)
	if err != nil {
		return raised, fmt.Errorf("events of %s: %w", id, err)
	}
	next := nextCheck(m, readReceipts(events), l, now)
	if next.IsZero() {
		err = r.store.ClearAlarm(ctx, backends.AlarmPECReceipts, id)
	} else {
		err = r.store.SetAlarm(ctx, backends.Alarm{Kind: backends.AlarmPECReceipts, MessageID: id, At: next})
	}
	if err != nil && !errors.Is(err, backends.ErrNotFound) {
		return raised, fmt.Errorf("receipts alarm of %s: %w", id, err)
	}
	return raised, nil
}

// nextCheck is when m's receipts must be looked at again; zero when none
// can be late any more.
func nextCheck(m *backends.Message, s *receipts, l Limits, now time.Time) time.Time {
	switch {
	case s.refused: // not accepted: no receipt follows
		return time.Time{}
	case !s.acceptance && !s.sentAt.IsZero():
		return s.sentAt.Add(l.Acceptance)
	case s.acceptedAt.IsZero():
		// Said to be late (or not SENT yet): a late acceptance would start
		// the deliveries' time, and the receipt that brings it rings the
		// alarm; meanwhile, a look now and then.
		return now.Add(l.Acceptance)
	}
	for _, a := range s.expected(m) {
		if !s.settled[a] {
			return s.acceptedAt.Add(l.Delivery)
		}
	}
	return time.Time{}
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
