package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/genropy/postino/backends"
)

// txRows holds the rows a transaction has locked and changes in memory,
// and writes them at its end with one statement per table, whatever the
// number of messages: the moves of a whole group of callers cost a few
// statements. It is also the backends.EventTx of the event rules.
//
// Locks come in one order in every transaction: events, then messages,
// each by id, then the counters (changes.flush), so that two transactions,
// of one relay or of two, never wait on each other in a cycle.
type txRows struct {
	ctx context.Context
	tx  *sql.Tx

	msgs      map[string]*backends.Message
	dirtyMsgs []string
	// envelopes holds the messages whose envelope a move set (rows taken
	// over from the seed layout): only theirs is written again.
	envelopes map[string]bool
	events    map[string]*backends.Event
	dirtyEvs  []string
	newEvents []*backends.Event
	alarms    []backends.Alarm
	h         changes
}

var _ backends.EventTx = (*txRows)(nil)

func newTxRows(ctx context.Context, tx *sql.Tx) *txRows {
	return &txRows{ctx: ctx, tx: tx, msgs: map[string]*backends.Message{}, events: map[string]*backends.Event{}}
}

// sortedIDs returns ids once each, sorted: the order locks are taken in.
func sortedIDs(ids []string) []any {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// lockMessages reads and locks the messages of ids that exist, in id order.
func (w *txRows) lockMessages(ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	lock := messageLockStmt(sortedIDs(ids))
	msgs, err := queryMessages(w.ctx, w.tx, lock.query, lock.args...)
	w.adopt(msgs)
	return err
}

// messageLockStmt reads and locks messages by id, in id order.
func messageLockStmt(ids []any) stmt {
	return stmt{"SELECT " + messageCols + " FROM emails WHERE id IN (" + inList(len(ids)) + ") ORDER BY id FOR UPDATE", ids}
}

// adopt takes messages the transaction has locked.
func (w *txRows) adopt(msgs []*backends.Message) {
	for _, m := range msgs {
		w.msgs[m.ID] = m
	}
}

// lockEvents reads and locks the events of ids that exist, in id order;
// skip passes over those another transaction holds.
func (w *txRows) lockEvents(ids []string, skip bool) error {
	if len(ids) == 0 {
		return nil
	}
	lock := eventLockStmt(sortedIDs(ids), skip)
	events, err := queryEvents(w.ctx, w.tx, lock.query, lock.args...)
	for _, e := range events {
		w.events[e.ID] = e
	}
	return err
}

// Move applies t to its message in memory: ErrNotFound when the message is
// not among the locked ones, ErrLockNotAcquired when it is not in t.From.
// The history rows, the counts, the alarm and the event go with it.
func (w *txRows) Move(t backends.Transition) error {
	m, ok := w.msgs[t.ID]
	if !ok {
		return backends.ErrNotFound
	}
	if !t.Holds(m) {
		return backends.ErrLockNotAcquired
	}
	final := t.Final()
	t.Apply(m, final)
	m.Version++
	w.dirtyMsgs = append(w.dirtyMsgs, m.ID)
	if t.Envelope != nil {
		if w.envelopes == nil {
			w.envelopes = map[string]bool{}
		}
		w.envelopes[m.ID] = true
	}
	w.h.count(t.From, -1)
	w.h.count(final, 1)
	for i, st := range t.Steps() {
		var details []byte
		if i == 0 {
			details = t.Details
		}
		w.h.add(t.ID, st.To, st.Reason, t.At, details)
	}
	if t.Alarm != nil {
		w.alarms = append(w.alarms, *t.Alarm)
	}
	if t.Event != nil {
		if err := t.Event.Prepare(t.ID, t.At); err != nil {
			return err
		}
		w.newEvents = append(w.newEvents, t.Event)
	}
	return nil
}

func (w *txRows) Event(id string) (*backends.Event, error) {
	e, ok := w.events[id]
	if !ok {
		return nil, fmt.Errorf("event %s: %w", id, backends.ErrNotFound)
	}
	return e, nil
}

func (w *txRows) PutEvent(_, e *backends.Event) error {
	w.events[e.ID] = e
	w.dirtyEvs = append(w.dirtyEvs, e.ID)
	return nil
}

func (w *txRows) Status(id string) (backends.Status, error) {
	m, ok := w.msgs[id]
	if !ok {
		return "", fmt.Errorf("message %s: %w", id, backends.ErrNotFound)
	}
	return m.Status, nil
}

// write stores what changed: the new events, the changed events, the
// changed messages, the alarms, then the history and the counts.
func (w *txRows) write() error {
	newEvents, err := w.insertEvents()
	if err != nil {
		return err
	}
	events := w.writeEvents()
	messages, err := w.writeMessages()
	if err != nil {
		return err
	}
	err = execAll(w.ctx, w.tx, append([]stmt{newEvents, events, messages, w.writeAlarms()}, w.h.stmts()...))
	// Of these, only the new events' insert can meet a taken key: the
	// others update the rows they meet.
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 {
		return fmt.Errorf("event: %w", backends.ErrDuplicate)
	}
	return err
}

// insertEvents numbers the new events after their messages' last ones
// (whose rows the transaction holds, so no one else numbers them) and
// returns their insert.
func (w *txRows) insertEvents() (stmt, error) {
	if len(w.newEvents) == 0 {
		return stmt{}, nil
	}
	var owners []string
	for _, e := range w.newEvents {
		owners = append(owners, e.MessageID)
	}
	last := lastSeqStmt(sortedIDs(owners))
	rows, err := w.tx.QueryContext(w.ctx, last.query, last.args...)
	if err != nil {
		return stmt{}, err
	}
	seqs := map[string]int64{}
	for rows.Next() {
		var id string
		var seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			rows.Close()
			return stmt{}, err
		}
		seqs[strings.TrimRight(id, " ")] = seq
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return stmt{}, err
	}
	args := make([]any, 0, 14*len(w.newEvents))
	for _, e := range w.newEvents {
		seqs[e.MessageID]++
		e.Seq = seqs[e.MessageID]
		args = append(args, eventArgs(e)...)
	}
	return stmt{"INSERT INTO email_events (" + eventCols + ") VALUES " + rowsOf(14, len(w.newEvents)), args}, nil
}

// lastSeqStmt reads the last event number of each message of ids
// (idx_email_seq).
func lastSeqStmt(ids []any) stmt {
	return stmt{"SELECT email_id, MAX(seq) FROM email_events WHERE email_id IN (" + inList(len(ids)) + ") GROUP BY email_id", ids}
}

// eventArgs are an event's values in the order of eventCols.
func eventArgs(e *backends.Event) []any {
	return []any{e.ID, e.MessageID, e.Seq, e.Outcome, null(e.Reason), e.At.UTC(), nullBytes(e.Details), e.State, e.Attempts,
		e.DueAt.UTC(), nullTime(e.LeaseUntil), null(e.LastError), nullJSON(e.Acked), e.UpdatedAt.UTC()}
}

// writeEvents writes the changed events, which exist and are locked: the
// insert always finds its row and updates it.
func (w *txRows) writeEvents() stmt {
	ids := sortedIDs(w.dirtyEvs)
	if len(ids) == 0 {
		return stmt{}
	}
	args := make([]any, 0, 14*len(ids))
	for _, id := range ids {
		args = append(args, eventArgs(w.events[id.(string)])...)
	}
	return stmt{"INSERT INTO email_events (" + eventCols + ") VALUES " + rowsOf(14, len(ids)) +
		` ON DUPLICATE KEY UPDATE state = VALUES(state), updated_at = VALUES(updated_at), lease_until = VALUES(lease_until),
		acked = VALUES(acked), attempts = VALUES(attempts), due_at = VALUES(due_at), last_error = VALUES(last_error)`, args}
}

// writeMessages writes the changed messages, which exist and are locked,
// as Move left them.
func (w *txRows) writeMessages() (stmt, error) {
	ids := sortedIDs(w.dirtyMsgs)
	if len(ids) == 0 {
		return stmt{}, nil
	}
	args := make([]any, 0, 12*len(ids))
	for _, id := range ids {
		m := w.msgs[id.(string)]
		var results, envelope []byte
		if m.Results != nil {
			var err error
			if results, err = json.Marshal(m.Results); err != nil {
				return stmt{}, err
			}
		}
		if w.envelopes[m.ID] {
			var err error
			if envelope, err = json.Marshal(m.Envelope); err != nil {
				return stmt{}, err
			}
		}
		queued := m.QueueTime()
		if queued.IsZero() { // a row of the seed layout, READY with no due time
			queued = m.CreatedAt
		}
		args = append(args, m.ID, m.Status, null(m.Reason), m.Version, m.UpdatedAt.UTC(), nullTime(m.LeaseUntil), nullTime(m.DueAt),
			queued.UTC(), m.Attempts, null(m.Route), nullBytes(results), nullBytes(envelope))
	}
	return stmt{`INSERT INTO emails (id, status, reason, version, updated_at, lease_until, due_at, queue_at,
		attempts, route, results, envelope) VALUES ` + rowsOf(12, len(ids)) + ` ON DUPLICATE KEY UPDATE status = VALUES(status),
		reason = VALUES(reason), version = VALUES(version), updated_at = VALUES(updated_at), lease_until = VALUES(lease_until),
		due_at = VALUES(due_at), queue_at = VALUES(queue_at), attempts = VALUES(attempts), route = VALUES(route),
		results = VALUES(results), envelope = COALESCE(VALUES(envelope), envelope)`, args}, nil
}

func (w *txRows) writeAlarms() stmt {
	if len(w.alarms) == 0 {
		return stmt{}
	}
	args := make([]any, 0, 3*len(w.alarms))
	for _, a := range w.alarms {
		args = append(args, a.Kind, a.MessageID, a.At.UTC())
	}
	return stmt{"INSERT INTO email_alarms (kind, email_id, due_at) VALUES " + rowsOf(3, len(w.alarms)) +
		" ON DUPLICATE KEY UPDATE due_at = VALUES(due_at)", args}
}

// rowsOf makes the VALUES of n rows of k columns.
func rowsOf(k, n int) string {
	row := "(" + inList(k) + "), "
	return strings.TrimSuffix(strings.Repeat(row, n), ", ")
}
