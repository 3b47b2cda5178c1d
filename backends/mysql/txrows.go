package mysql

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// txRows holds the rows a transaction has locked and changes in memory
// (sqlstore.Rows, the EventTx of the event rules), and writes them at its
// end with one statement per table, whatever the number of messages: the
// moves of a whole group of callers cost a few statements.
//
// Locks come in one order in every transaction: events, then messages,
// each by id, then the counters (changesStmts), so that two transactions,
// of one relay or of two, never wait on each other in a cycle.
type txRows struct {
	sqlstore.Rows
	sqlDB // the transaction's statements
	ctx   context.Context
	tx    *txn
	// lastSeq is the last event number of each message LockMessages
	// locked, 0 for none.
	lastSeq map[string]int64
}

func newTxRows(ctx context.Context, tx *txn) *txRows {
	return &txRows{Rows: sqlstore.NewRows(), sqlDB: sqlDB{tx}, ctx: ctx, tx: tx, lastSeq: map[string]int64{}}
}

// sortedIDs returns ids once each, sorted (sqlstore.SortedIDs), as
// arguments.
func sortedIDs(ids []string) []any {
	return anyOf(sqlstore.SortedIDs(ids))
}

// LockMessages reads and locks the messages of ids that exist, in id order.
func (w *txRows) LockMessages(ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	lock := messageLockStmt(sortedIDs(ids))
	msgs, err := sqlstore.QueryAll(w.ctx, sqlDB{w.tx}, func(r sqlstore.Scanner) (*backends.Message, error) {
		var seq int64
		m, err := scanMessage(r, &seq)
		if err == nil {
			w.lastSeq[m.ID] = seq
		}
		return m, err
	}, lock)
	w.Adopt(msgs)
	return err
}

// messageLockStmt reads and locks messages by id, in id order, each with
// the number of its last event, which the events this transaction adds
// follow (insertEvents): the lock keeps others from adding any until the
// commit, and a locking read sees the latest event_seq, even one committed
// while it waited. A relay of an earlier version, which numbers from the
// events and keeps no event_seq, may share the database while a fleet is
// upgraded: the events' own last number (idx_email_seq) counts its events.
// That read sees the events as of the statement's start, so it may miss
// one such a relay committed while the lock waited; the insert then meets
// idx_email_seq, and the group runs again write by write (CommitGroup).
func messageLockStmt(ids []any) stmt {
	return stmt{Query: "SELECT " + messageCols + `, GREATEST(event_seq, COALESCE((SELECT MAX(seq) FROM email_events v WHERE v.email_id = emails.id), 0))
		FROM emails WHERE id IN (` + inList(len(ids)) + ") ORDER BY id FOR UPDATE", Args: ids}
}

// LockEvents reads and locks the events of ids that exist, in id order;
// skip passes over those another transaction holds.
func (w *txRows) LockEvents(ids []string, skip bool) error {
	if len(ids) == 0 {
		return nil
	}
	lock := eventLockStmt(sortedIDs(ids), skip)
	events, err := queryEvents(w.ctx, w.tx, lock)
	w.AdoptEvents(events)
	return err
}

// Write stores what changed, with the COMMIT (txn.Last): the new events,
// the changed events, the changed messages, the alarms, then the history
// and the counts. Of these, only the new events' insert can meet a taken
// key; the others update the rows they meet.
func (w *txRows) Write() error {
	newEvents, err := w.insertEvents()
	if err != nil {
		return err
	}
	events := w.writeEvents()
	messages, err := w.writeMessages()
	if err != nil {
		return err
	}
	w.tx.Last(append([]stmt{newEvents, events, messages, w.writeAlarms()}, changesStmts(&w.Changes)...)...)
	return nil
}

// EventsDue: no relay is told of work made due on MySQL; each polls.
func (w *txRows) EventsDue() {}

// insertEvents numbers the new events after their messages' last ones,
// which LockMessages read with the locks that keep anyone else from
// numbering them until the commit, and returns their insert. Every rule
// that adds an event locks its message that way.
func (w *txRows) insertEvents() (stmt, error) {
	if len(w.NewEvents) == 0 {
		return stmt{}, nil
	}
	args := make([]any, 0, 14*len(w.NewEvents))
	for _, e := range w.NewEvents {
		last, ok := w.lastSeq[e.MessageID]
		if !ok {
			return stmt{}, fmt.Errorf("event %s: its message %s was not locked with its last event number", e.ID, e.MessageID)
		}
		e.Seq = last + 1
		w.lastSeq[e.MessageID] = e.Seq
		// Its row keeps the number (writeMessages).
		w.DirtyMessages = append(w.DirtyMessages, e.MessageID)
		args = append(args, eventArgs(e)...)
	}
	return stmt{Query: "INSERT INTO email_events (" + eventCols + ") VALUES " + rowsOf(14, len(w.NewEvents)), Args: args}, nil
}

// eventArgs are an event's values in the order of eventCols.
func eventArgs(e *backends.Event) []any {
	return []any{e.ID, e.MessageID, e.Seq, e.Outcome, null(e.Reason), e.At.UTC(), nullBytes(e.Details), e.State, e.Attempts,
		e.DueAt.UTC(), nullTime(e.LeaseUntil), null(e.LastError), nullJSON(e.Acked), e.UpdatedAt.UTC()}
}

// writeEvents writes the changed events, which exist and are locked: the
// insert always finds its row and updates it.
func (w *txRows) writeEvents() stmt {
	ids := sortedIDs(w.DirtyEvents)
	if len(ids) == 0 {
		return stmt{}
	}
	args := make([]any, 0, 14*len(ids))
	for _, id := range ids {
		args = append(args, eventArgs(w.Events[id.(string)])...)
	}
	return stmt{Query: "INSERT INTO email_events (" + eventCols + ") VALUES " + rowsOf(14, len(ids)) +
		` ON DUPLICATE KEY UPDATE state = VALUES(state), updated_at = VALUES(updated_at), lease_until = VALUES(lease_until),
		acked = VALUES(acked), attempts = VALUES(attempts), due_at = VALUES(due_at), last_error = VALUES(last_error)`, Args: args}
}

// writeMessages writes the changed messages, which exist and are locked,
// as Move left them.
func (w *txRows) writeMessages() (stmt, error) {
	ids := sortedIDs(w.DirtyMessages)
	if len(ids) == 0 {
		return stmt{}, nil
	}
	args := make([]any, 0, 13*len(ids))
	for _, id := range ids {
		m := w.Messages[id.(string)]
		var results, envelope []byte
		if m.Results != nil {
			var err error
			if results, err = json.Marshal(m.Results); err != nil {
				return stmt{}, err
			}
		}
		if w.Envelopes[m.ID] {
			var err error
			if envelope, err = json.Marshal(m.Envelope); err != nil {
				return stmt{}, err
			}
		}
		queued := m.QueueTime()
		if queued.IsZero() { // a row of the seed layout, READY with no due time
			queued = m.CreatedAt
		}
		// A message locked without its event number (a claim's) has
		// none here: 0, which GREATEST leaves as it was.
		args = append(args, m.ID, m.Status, null(m.Reason), m.Version, m.UpdatedAt.UTC(), nullTime(m.LeaseUntil), nullTime(m.DueAt),
			queued.UTC(), m.Attempts, null(m.Route), nullBytes(results), nullBytes(envelope), w.lastSeq[m.ID])
	}
	return stmt{Query: `INSERT INTO emails (id, status, reason, version, updated_at, lease_until, due_at, queue_at,
		attempts, route, results, envelope, event_seq) VALUES ` + rowsOf(13, len(ids)) + ` ON DUPLICATE KEY UPDATE status = VALUES(status),
		reason = VALUES(reason), version = VALUES(version), updated_at = VALUES(updated_at), lease_until = VALUES(lease_until),
		due_at = VALUES(due_at), queue_at = VALUES(queue_at), attempts = VALUES(attempts), route = VALUES(route),
		results = VALUES(results), envelope = COALESCE(VALUES(envelope), envelope), event_seq = GREATEST(event_seq, VALUES(event_seq))`, Args: args}, nil
}

func (w *txRows) writeAlarms() stmt {
	if len(w.Alarms) == 0 {
		return stmt{}
	}
	args := make([]any, 0, 3*len(w.Alarms))
	for _, a := range w.Alarms {
		args = append(args, a.Kind, a.MessageID, a.At.UTC())
	}
	return stmt{Query: "INSERT INTO email_alarms (kind, email_id, due_at) VALUES " + rowsOf(3, len(w.Alarms)) +
		" ON DUPLICATE KEY UPDATE due_at = VALUES(due_at)", Args: args}
}

// rowsOf makes the VALUES of n rows of k columns.
func rowsOf(k, n int) string {
	row := "(" + inList(k) + "), "
	return strings.TrimSuffix(strings.Repeat(row, n), ", ")
}
