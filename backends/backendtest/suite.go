// Package backendtest is the conformance suite of the outbox contract. Every
// store runs it unchanged from its own tests:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T) backends.Outbox { return openStore(t) })
//	}
package backendtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
)

// Opener gives a subtest a store of its own, empty, closed by the subtest's
// cleanup.
type Opener func(t *testing.T) backends.Outbox

// Run runs the whole suite against the stores open returns: one group of
// tests for each part of the contract.
func Run(t *testing.T, open Opener) {
	group(t, "Messages", messageTests, func(t *testing.T) messageStore { return open(t) })
	group(t, "Queue", queueTests, func(t *testing.T) messageStore { return open(t) })
	group(t, "Leases", leaseTests, func(t *testing.T) messageStore { return open(t) })
	group(t, "Events", eventTests, func(t *testing.T) eventStore { return open(t) })
	group(t, "EventLeases", eventLeaseTests, func(t *testing.T) eventStore { return open(t) })
	group(t, "Batches", batchTests, func(t *testing.T) batchStore { return open(t) })
	group(t, "Cursors", cursorTests, func(t *testing.T) backends.Cursors { return open(t) })
	group(t, "Links", linkTests, func(t *testing.T) linkStore { return open(t) })
	group(t, "Alarms", alarmTests, func(t *testing.T) alarmStore { return open(t) })
	group(t, "Throughput", throughputTests, func(t *testing.T) throughputStore { return open(t) })
	group(t, "Suppressions", suppressionTests, func(t *testing.T) suppressionStore { return open(t) })
	group(t, "Documents", documentTests, func(t *testing.T) backends.Documents { return open(t) })
}

// What each group of tests needs of a store: its part of the contract, and
// the messages and transitions that make the rows it works on.
type (
	messageStore interface {
		backends.Messages
		backends.Queue
		backends.Leases
	}
	eventStore interface {
		messageStore
		backends.Events
	}
	batchStore interface {
		messageStore
		backends.Batches
		backends.BatchTallies
	}
	linkStore interface {
		messageStore
		backends.Links
	}
	alarmStore interface {
		messageStore
		backends.Alarms
	}
	throughputStore interface {
		eventStore
		backends.Throughput
	}
)

// test is one check of a part of the contract, on a store S.
type test[S any] struct {
	name string
	fn   func(*testing.T, S)
}

// group runs tests, each on a fresh store.
func group[S any](t *testing.T, name string, tests []test[S], open func(*testing.T) S) {
	t.Run(name, func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) { tc.fn(t, open(t)) })
		}
	})
}

// base is the suite's clock: whole microseconds, which every store keeps.
var base = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return base.Add(d) }

func newMessage(id string) *backends.Message {
	return &backends.Message{
		ID:        id,
		MessageID: id + "@test.example",
		Priority:  backends.PriorityNormal,
		Reason:    "accepted for test",
		EmlPath:   "spool/" + id + ".eml",
		CreatedAt: base,
		Envelope: backends.Envelope{
			Sender:     "app@example.com",
			Recipients: []string{"a@example.net", "b@example.org"},
			ClientAddr: "127.0.0.1:40000",
			Helo:       "app.local",
			AuthUser:   "app",
			ReceivedAt: base,
			Size:       1234,
			Control:    map[string]string{"X-Postino-Priority": "2"},
		},
	}
}

func create(t *testing.T, s messageStore, m *backends.Message) *backends.Message {
	t.Helper()
	if err := s.Create(context.Background(), m); err != nil {
		t.Fatalf("Create(%s): %v", m.ID, err)
	}
	return m
}

func mustGet(t *testing.T, s messageStore, id string) *backends.Message {
	t.Helper()
	m, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return m
}

func move(t *testing.T, s messageStore, id string, from, to backends.Status, now time.Time) *backends.Message {
	t.Helper()
	tr := backends.Transition{ID: id, From: from, To: to, At: now, Reason: fmt.Sprintf("%s to %s", from, to)}
	if to.Working() {
		tr.LeaseUntil = now.Add(time.Minute)
	}
	if err := s.Transition(context.Background(), tr); err != nil {
		t.Fatalf("Transition(%s, %s -> %s): %v", id, from, to, err)
	}
	return mustGet(t, s, id)
}

// path finds the shortest way from ACCEPTED to a status.
func path(to backends.Status) []backends.Status {
	prev := map[backends.Status]backends.Status{backends.StatusAccepted: ""}
	queue := []backends.Status{backends.StatusAccepted}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == to {
			break
		}
		for _, next := range backends.Statuses() {
			if _, seen := prev[next]; !seen && backends.CanTransition(cur, next) {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	var out []backends.Status
	for s := to; s != ""; s = prev[s] {
		out = append([]backends.Status{s}, out...)
	}
	return out
}

// walk creates a message and moves it along the path to status.
func walk(t *testing.T, s messageStore, id string, status backends.Status) *backends.Message {
	t.Helper()
	return advance(t, s, create(t, s, newMessage(id)), status)
}

// advance moves a message just created along the path to status.
func advance(t *testing.T, s messageStore, m *backends.Message, status backends.Status) *backends.Message {
	t.Helper()
	id := m.ID
	p := path(status)
	if p[0] != backends.StatusAccepted || p[len(p)-1] != status {
		t.Fatalf("no path from ACCEPTED to %s", status)
	}
	for i := 1; i < len(p); i++ {
		m = move(t, s, id, p[i-1], p[i], at(time.Duration(i)*time.Second))
	}
	return m
}
