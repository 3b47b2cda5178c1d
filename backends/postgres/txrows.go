package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// txRows holds the rows a transaction has locked and changes in memory
// (sqlstore.Rows, the EventTx of the event rules), and writes them at its
// end with one statement per table, whatever the number of messages
// (arrays, unnest): the moves of a whole group of callers cost a few
// statements.
//
// Locks come in one order in every transaction: events, then messages,
// each by id, then the counters (flushChanges), so that two transactions,
// of one relay or of two, never wait on each other in a cycle.
type txRows struct {
	sqlstore.Rows
	pgDB // the transaction's statements
	ctx  context.Context
	tx   pgx.Tx
	// wake holds the channels to notify at the commit: work became due.
	wake map[string]bool
	// sender names the store in its notifications (Store.sender).
	sender string
}

// newTxRows holds the rows of tx, which notifies as sender.
func newTxRows(ctx context.Context, tx pgx.Tx, sender string) *txRows {
	return &txRows{Rows: sqlstore.NewRows(), pgDB: pgDB{tx}, ctx: ctx, tx: tx, sender: sender}
}

// LockMessages reads and locks the messages of ids that exist, in id order.
func (w *txRows) LockMessages(ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	msgs, err := queryMessages(w.ctx, w.tx, messageLockStmt(sqlstore.SortedIDs(ids)))
	w.Adopt(msgs)
	return err
}

// messageLockStmt reads and locks messages by id, in id order.
func messageLockStmt(ids []string) stmt {
	return stmt{Query: "SELECT " + messageCols + " FROM emails WHERE id = ANY($1) ORDER BY id FOR UPDATE", Args: []any{ids}}
}

// LockEvents reads and locks the events of ids that exist, in id order;
// skip passes over those another transaction holds.
func (w *txRows) LockEvents(ids []string, skip bool) error {
	if len(ids) == 0 {
		return nil
	}
	events, err := queryEvents(w.ctx, w.tx, eventLockStmt(sqlstore.SortedIDs(ids), skip))
	w.AdoptEvents(events)
	return err
}

// notify has the commit wake the relays that LISTEN on channel.
func (w *txRows) notify(channel string) {
	if w.wake == nil {
		w.wake = map[string]bool{}
	}
	w.wake[channel] = true
}

// EventsDue notifies the dispatchers: a statement of the transaction's
// own made events pending and due.
func (w *txRows) EventsDue() { w.notify(ChannelEvents) }

// notifyDue notifies the message's queue when st makes it claimable now.
func (w *txRows) notifyDue(st backends.Status, due time.Time) {
	switch {
	case st == backends.StatusAccepted:
		w.notify(ChannelAccepted)
	case st == backends.StatusReady && !due.After(time.Now()):
		w.notify(ChannelReady)
	}
}

// notifyEvent notifies the dispatchers when e is pending and due now.
func (w *txRows) notifyEvent(e *backends.Event) {
	if e.State == backends.EventPending && !e.DueAt.After(time.Now()) {
		w.notify(ChannelEvents)
	}
}

// Move is sqlstore.Rows.Move, and notifies the message's queue when the
// move makes it claimable now.
func (w *txRows) Move(t backends.Transition) error {
	if err := w.Rows.Move(t); err != nil {
		return err
	}
	m := w.Messages[t.ID]
	w.notifyDue(m.Status, m.DueAt)
	return nil
}

// PutEvent is sqlstore.Rows.PutEvent, and notifies the dispatchers when
// the event is pending and due now.
func (w *txRows) PutEvent(before, e *backends.Event) error {
	if err := w.Rows.PutEvent(before, e); err != nil {
		return err
	}
	w.notifyEvent(e)
	return nil
}

// Write stores what changed: the new events, the changed events, the
// changed messages, the alarms, then the history and the counts, and
// notifies the work made due; every statement in one round trip (a batch,
// pipelined), but the read of the events' last numbers before.
func (w *txRows) Write() error {
	b := &pgx.Batch{}
	if err := w.insertEvents(b); err != nil {
		return err
	}
	for _, f := range []func(*pgx.Batch) error{w.writeEvents, w.writeMessages, w.writeAlarms} {
		if err := f(b); err != nil {
			return err
		}
	}
	flushChanges(b, &w.Changes)
	queueNotify(b, w.sender, w.wake)
	err := sendBatch(w.ctx, w.tx, b)
	if pgCode(err) == codeUniqueViolation { // the only insert that can meet a key: the new events'
		return fmt.Errorf("event: %w", backends.ErrDuplicate)
	}
	return err
}

// sendBatch runs the statements of b in one round trip, and returns the
// first error.
func sendBatch(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

// insertEvents numbers the new events after their messages' last ones
// (whose rows the transaction holds, so no one else numbers them) and
// inserts them.
func (w *txRows) insertEvents(b *pgx.Batch) error {
	if len(w.NewEvents) == 0 {
		return nil
	}
	var owners []string
	for _, e := range w.NewEvents {
		owners = append(owners, e.MessageID)
	}
	last := lastSeqStmt(sqlstore.SortedIDs(owners))
	rows, err := w.tx.Query(w.ctx, last.Query, last.Args...)
	if err != nil {
		return err
	}
	seqs := map[string]int64{}
	for rows.Next() {
		var id string
		var seq int64
		if err := rows.Scan(&id, &seq); err != nil {
			rows.Close()
			return err
		}
		seqs[id] = seq
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var c eventColumns
	for _, e := range w.NewEvents {
		seqs[e.MessageID]++
		e.Seq = seqs[e.MessageID]
		c.add(e)
		w.notifyEvent(e)
	}
	b.Queue(`INSERT INTO email_events (`+eventCols+`) SELECT * FROM unnest($1::text[], $2::text[],
		$3::int[], $4::text[], $5::text[], $6::timestamptz[], $7::text[], $8::text[], $9::int[], $10::timestamptz[],
		$11::timestamptz[], $12::text[], $13::text[], $14::timestamptz[])`, c.args()...)
	return nil
}

// lastSeqStmt reads the last event number of each message of ids
// (idx_email_seq).
func lastSeqStmt(ids []string) stmt {
	return stmt{Query: "SELECT email_id, MAX(seq) FROM email_events WHERE email_id = ANY($1) GROUP BY email_id", Args: []any{ids}}
}

// eventColumns are events' values, a column each, in the order of
// eventCols.
type eventColumns struct {
	id, message, outcome, state     []string
	seq                             []int64
	attempts                        []int
	reason, details, lastErr, acked []*string
	at, due, updated                []time.Time
	lease                           []*time.Time
}

func (c *eventColumns) add(e *backends.Event) {
	c.id, c.message, c.seq, c.outcome = append(c.id, e.ID), append(c.message, e.MessageID), append(c.seq, e.Seq), append(c.outcome, e.Outcome)
	c.reason, c.at, c.details = append(c.reason, null(e.Reason)), append(c.at, ts(e.At)), append(c.details, nullBytes(e.Details))
	c.state, c.attempts, c.due = append(c.state, string(e.State)), append(c.attempts, e.Attempts), append(c.due, ts(e.DueAt))
	c.lease, c.lastErr = append(c.lease, nullTime(e.LeaseUntil)), append(c.lastErr, null(e.LastError))
	c.acked, c.updated = append(c.acked, nullJSON(e.Acked)), append(c.updated, ts(e.UpdatedAt))
}

func (c *eventColumns) args() []any {
	return []any{c.id, c.message, c.seq, c.outcome, c.reason, c.at, c.details, c.state, c.attempts, c.due, c.lease, c.lastErr, c.acked, c.updated}
}

func nullJSON(v []string) *string {
	if v == nil {
		return nil
	}
	b, _ := json.Marshal(v)
	s := string(b)
	return &s
}

// writeEvents writes the changed events, which exist and are locked.
func (w *txRows) writeEvents(b *pgx.Batch) error {
	ids := sqlstore.SortedIDs(w.DirtyEvents)
	if len(ids) == 0 {
		return nil
	}
	var c eventColumns
	for _, id := range ids {
		c.add(w.Events[id])
	}
	b.Queue(`UPDATE email_events e SET state = u.state, updated_at = u.updated_at, lease_until = u.lease_until,
		acked = u.acked, attempts = u.attempts, due_at = u.due_at, last_error = u.last_error
		FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::timestamptz[], $5::text[], $6::int[], $7::timestamptz[], $8::text[])
			AS u(event_id, state, updated_at, lease_until, acked, attempts, due_at, last_error)
		WHERE e.event_id = u.event_id`, c.id, c.state, c.updated, c.lease, c.acked, c.attempts, c.due, c.lastErr)
	return nil
}

// writeMessages writes the changed messages, which exist and are locked,
// as Move left them, with one statement.
func (w *txRows) writeMessages(b *pgx.Batch) error {
	ids := sqlstore.SortedIDs(w.DirtyMessages)
	if len(ids) == 0 {
		return nil
	}
	var (
		status                           []string
		reason, route, results, envelope []*string
		version, attempts                []int
		updated, queued                  []time.Time
		lease, due                       []*time.Time
	)
	for _, id := range ids {
		m := w.Messages[id]
		var res, env []byte
		if m.Results != nil {
			var err error
			if res, err = json.Marshal(m.Results); err != nil {
				return err
			}
		}
		if w.Envelopes[m.ID] {
			var err error
			if env, err = json.Marshal(m.Envelope); err != nil {
				return err
			}
		}
		q := m.QueueTime()
		if q.IsZero() { // a row of the seed layout, READY with no due time
			q = m.CreatedAt
		}
		status, reason, version = append(status, string(m.Status)), append(reason, null(m.Reason)), append(version, m.Version)
		updated, lease, due, queued = append(updated, ts(m.UpdatedAt)), append(lease, nullTime(m.LeaseUntil)), append(due, nullTime(m.DueAt)), append(queued, ts(q))
		attempts, route, results, envelope = append(attempts, m.Attempts), append(route, null(m.Route)), append(results, nullBytes(res)), append(envelope, nullBytes(env))
	}
	b.Queue(`UPDATE emails e SET status = u.status, reason = u.reason, version = u.version,
		updated_at = u.updated_at, lease_until = u.lease_until, due_at = u.due_at, queue_at = u.queue_at, attempts = u.attempts,
		route = u.route, results = u.results, envelope = COALESCE(u.envelope, e.envelope)
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::timestamptz[], $6::timestamptz[], $7::timestamptz[],
			$8::timestamptz[], $9::int[], $10::text[], $11::text[], $12::text[])
			AS u(id, status, reason, version, updated_at, lease_until, due_at, queue_at, attempts, route, results, envelope)
		WHERE e.id = u.id`, ids, status, reason, version, updated, lease, due, queued, attempts, route, results, envelope)
	return nil
}

// writeAlarms sets the alarms the moves set, the last of each message and
// kind (a statement may change a row once).
func (w *txRows) writeAlarms(b *pgx.Batch) error {
	if len(w.Alarms) == 0 {
		return nil
	}
	last := map[[2]string]time.Time{}
	for _, a := range w.Alarms {
		last[[2]string{a.MessageID, a.Kind}] = a.At
	}
	var kinds, ids []string
	var at []time.Time
	for k, t := range last {
		ids, kinds, at = append(ids, k[0]), append(kinds, k[1]), append(at, ts(t))
	}
	b.Queue(`INSERT INTO email_alarms (kind, email_id, due_at)
		SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[])
		ON CONFLICT (email_id, kind) DO UPDATE SET due_at = EXCLUDED.due_at`, kinds, ids, at)
	return nil
}

// countShards is the number of counter rows of a status: a transaction
// picks one at random, so that concurrent ones seldom share a row.
const countShards = 16

// flushChanges queues the history rows and the counters' changes of c (by
// status, and the activities of this minute) in b, and forgets them: one
// statement a table whatever the number of messages, in the shard of the
// counters that the transaction picks.
func flushChanges(b *pgx.Batch, c *backends.Changes) {
	history, statuses, deltas := c.Take()
	acts, ns := c.TakeActivities()
	if len(history) > 0 {
		var ids, sts []string
		var reasons, details []*string
		var at []time.Time
		for _, h := range history {
			ids, sts, reasons = append(ids, h.MessageID), append(sts, string(h.Status)), append(reasons, null(h.Reason))
			at, details = append(at, ts(h.At)), append(details, nullBytes(h.Details))
		}
		// WITH ORDINALITY keeps the rows' order in the ids they get, which
		// History reads them by.
		b.Queue(`INSERT INTO email_statuses (email_id, status, reason, created_at, details)
			SELECT email_id, status, reason, created_at, details
			FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::text[]) WITH ORDINALITY
				AS h(email_id, status, reason, created_at, details, n) ORDER BY n`, ids, sts, reasons, at, details)
	}
	shard := rand.N(countShards)
	if len(statuses) > 0 {
		b.Queue(`INSERT INTO email_counts (status, shard, n)
			SELECT s, $2::smallint, d FROM unnest($1::text[], $3::bigint[]) AS c(s, d)
			ON CONFLICT (status, shard) DO UPDATE SET n = email_counts.n + EXCLUDED.n`, strs(statuses), shard, deltas)
	}
	if len(acts) > 0 {
		b.Queue(`INSERT INTO email_activity (minute, activity, shard, n)
			SELECT $1::timestamptz, a, $3::smallint, d FROM unnest($2::text[], $4::bigint[]) AS c(a, d)
			ON CONFLICT (minute, activity, shard) DO UPDATE SET n = email_activity.n + EXCLUDED.n`,
			backends.MinuteOf(time.Now()), strs(acts), shard, ns)
	}
}
