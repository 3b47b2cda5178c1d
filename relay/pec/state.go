package pec

import (
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/outcome"
)

// receipts is what the events of a message say of its receipts so far.
// Both the recorder, to tell whether a delivery receipt completes the
// message, and the overdue check, to tell who still owes one, read it.
type receipts struct {
	sentAt     time.Time
	acceptance bool      // an acceptance, a non-acceptance or its overdue notice
	acceptedAt time.Time // of the acceptance receipt
	refused    bool      // a non-acceptance: no receipt will follow
	certified  map[string]bool
	external   map[string]bool // esterno: ordinary mailboxes, no delivery receipt
	delivered  map[string]bool
	failed     bool            // a delivery error is on record
	settled    map[string]bool // delivered, failed, or said to be late
}

// eventPEC is the part of an event's details the recorder reads back.
type eventPEC struct {
	PEC outcome.PEC `json:"pec"`
}

func readReceipts(events []*backends.Event) *receipts {
	s := &receipts{certified: map[string]bool{}, external: map[string]bool{}, delivered: map[string]bool{}, settled: map[string]bool{}}
	for _, e := range events {
		switch e.Outcome {
		case OutcomeInvalidSignature:
			continue // says nothing that can be trusted
		case string(backends.StatusSent):
			s.sentAt = e.At
			continue
		case OutcomeAccepted, OutcomeNotAccepted, OutcomeAcceptanceOverdue:
			s.acceptance = true
			s.refused = s.refused || e.Outcome == OutcomeNotAccepted
		}
		var d eventPEC
		if len(e.Details) == 0 || json.Unmarshal(e.Details, &d) != nil {
			continue
		}
		s.note(d.PEC.Recipients)
		a := strings.ToLower(d.PEC.Delivery)
		switch e.Outcome {
		case OutcomeAccepted:
			s.acceptedAt = e.At
		case OutcomeDelivered, OutcomeRecipientDelivered:
			s.delivered[a], s.settled[a] = true, true
		case OutcomeNotDelivered:
			s.failed, s.settled[a] = true, true
		case OutcomeDeliveryOverdue:
			s.settled[a] = true
		}
	}
	return s
}

// note records the recipients a receipt lists.
func (s *receipts) note(rcpts []outcome.PECRecipient) {
	for _, rc := range rcpts {
		if rc.Type == "esterno" {
			s.external[strings.ToLower(rc.Address)] = true
		} else {
			s.certified[strings.ToLower(rc.Address)] = true
		}
	}
}

// expected are the recipients that owe a delivery receipt: the certified
// ones the receipts list or, when none lists them, the envelope's less the
// ordinary ones.
func (s *receipts) expected(m *backends.Message) []string {
	var out []string
	for a := range s.certified {
		out = append(out, a)
	}
	if len(out) == 0 {
		for _, a := range m.Envelope.Recipients {
			if a = strings.ToLower(a); !s.external[a] {
				out = append(out, a)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
