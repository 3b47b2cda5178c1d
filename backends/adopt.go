package backends

import (
	"fmt"
	"time"
)

// Adoption is what a store found among the messages an outbox of the seed
// layout left, and did with them.
type Adoption struct {
	// Found counts the seed's messages by status, as they were found.
	Found map[Status]int
	// Queued messages were on their way: they are ACCEPTED now, and intake
	// gives each the envelope its payload file or its headers say.
	Queued int
	// Told messages had an outcome no plugin was told of: an event tells it.
	Told int
	// Unsendable messages name no message file: INVALID, and the plugins told.
	Unsendable int
}

// Adopted is what taking a seed message over does with it.
type Adopted int

const (
	AdoptedNone       Adopted = iota // acknowledged already: left as it is
	AdoptedQueued                    // on its way: ACCEPTED, for intake
	AdoptedTold                      // an outcome: its event tells the plugins
	AdoptedUnsendable                // no message file: INVALID, told
)

// Count adds what was done with one message.
func (a *Adoption) Count(k Adopted) {
	switch k {
	case AdoptedQueued:
		a.Queued++
	case AdoptedTold:
		a.Told++
	case AdoptedUnsendable:
		a.Unsendable++
	}
}

// SeedAdoption is the move that takes over m, a message of the seed layout
// (no envelope) whose outcome, if it has one, no plugin was told of (it has
// no event), and what kind it is; the move is nil when m needs none. A
// message on its way goes back to ACCEPTED, where intake reads its envelope
// from its files; one naming no message file becomes INVALID; an outcome,
// or the seed's callback of one under way, gets the event that tells it.
// Stores make the move without checking it against the transitions
// Postino's own messages follow.
func SeedAdoption(m *Message, now time.Time) (*Transition, Adopted) {
	from := m.Status
	t := &Transition{ID: m.ID, From: from, At: now}
	switch {
	case from.Acknowledged():
		return nil, AdoptedNone
	case from.Undelivered() && m.EmlPath == "":
		t.To = StatusInvalid
		t.Reason = fmt.Sprintf("taken over from the seed layout (was %s) with no message file (EmlFilePath, eml_file_path): send it again from the app", from)
		t.Event = OutcomeEvent(from, t.To, t.Reason, seedDetails())
		return t, AdoptedUnsendable
	case from == StatusAccepted:
		return nil, AdoptedQueued // intake takes it as it is
	case from.Undelivered():
		t.To = StatusAccepted
		t.Reason = fmt.Sprintf("taken over from the seed layout (was %s): intake reads its envelope from its payload file or its headers", from)
		return t, AdoptedQueued
	}
	t.To = from
	if from.Working() {
		t.To = from.Previous()
	}
	t.Reason = fmt.Sprintf("taken over from the seed layout (was %s): its outcome is told to the plugins", from)
	t.Event = OutcomeEvent(from, t.To, m.Reason, seedDetails())
	return t, AdoptedTold
}

// seedDetails marks the events of messages taken over from the seed layout.
func seedDetails() map[string]any { return map[string]any{"taken_over_from": "seed layout"} }
