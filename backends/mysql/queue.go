package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
)

func (s *Store) Transition(ctx context.Context, t backends.Transition) error {
	if err := t.Prepare(time.Now().UTC()); err != nil {
		return err
	}
	if err := s.submit(ctx, &op{t: &t}); err != nil {
		return fmt.Errorf("message %s %s to %s: %w", t.ID, t.From, t.To, err)
	}
	return nil
}

// history gathers history rows, to write them in one statement.
type history struct {
	args []any
	n    int
}

func (h *history) add(id string, st backends.Status, reason string, at time.Time, details []byte) {
	h.args = append(h.args, id, st, null(reason), at.UTC(), nullBytes(details))
	h.n++
}

func (h *history) flush(ctx context.Context, tx *sql.Tx) error {
	if h.n == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO email_statuses (email_id, status, reason, created_at, details) VALUES "+
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", h.n), ", "), h.args...)
	h.args, h.n = h.args[:0], 0
	return err
}

// transition applies t inside tx: the conditional update, a history row per
// step (into h), and the event. A refusal (the message gone, or in another
// status) comes back as ErrNotFound or ErrLockNotAcquired and changes
// nothing.
func transition(ctx context.Context, tx *sql.Tx, t backends.Transition, h *history) error {
	final := t.Final()
	var results []byte
	if t.Results != nil {
		var err error
		if results, err = json.Marshal(t.Results); err != nil {
			return err
		}
	}
	var lease sql.NullTime
	if final.Working() {
		lease = nullTime(t.LeaseUntil)
	}
	add := 0
	if t.AddAttempt {
		add = 1
	}
	queue, queueArg := queueAt(final, t.DueAt, t.At)
	res, err := tx.ExecContext(ctx, `UPDATE emails SET status = ?, version = version + 1,
		reason = IF(?, reason, ?), updated_at = ?, lease_until = ?, due_at = COALESCE(?, due_at),
		attempts = attempts + ?, route = COALESCE(?, route), results = COALESCE(?, results),
		queue_at = `+queue+`
		WHERE id = ? AND status = ? AND (? OR lease_until = ?)`,
		final, t.KeepReason, null(t.Reason), t.At.UTC(), lease, nullTime(t.DueAt),
		add, null(t.Route), nullBytes(results), queueArg, t.ID, t.From, t.Held.IsZero(), t.Held.UTC().Truncate(backends.LeasePrecision))
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var st string
		if err := tx.QueryRowContext(ctx, "SELECT status FROM emails WHERE id = ?", t.ID).Scan(&st); errors.Is(err, sql.ErrNoRows) {
			return backends.ErrNotFound
		} else if err != nil {
			return err
		}
		return backends.ErrLockNotAcquired
	}
	for i, st := range t.Steps() {
		var details []byte
		if i == 0 {
			details = t.Details
		}
		h.add(t.ID, st.To, st.Reason, t.At, details)
	}
	if t.Alarm != nil {
		if err := setAlarm(ctx, tx, *t.Alarm); err != nil {
			return err
		}
	}
	if t.Event != nil {
		return insertEvent(ctx, tx, t.ID, t.Event, t.At)
	}
	return nil
}

// queueAt is the SQL, and its argument, for the time a message in status
// st waits by (backends.Message.QueueTime), given the due time and the time
// of the change the statement makes (zero due: unchanged). It reads no
// column the same statement sets, so the order of the SET clauses does not
// matter (MariaDB's SIMULTANEOUS_ASSIGNMENT).
func queueAt(st backends.Status, due, at time.Time) (string, any) {
	switch st.QueueClock() {
	case backends.ByDueTime:
		return "COALESCE(?, due_at)", nullTime(due)
	case backends.ByCreation:
		return "COALESCE(?, created_at)", nil
	}
	return "?", at.UTC()
}

func nullBytes(b []byte) sql.NullString { return sql.NullString{String: string(b), Valid: len(b) > 0} }

// refusal reports whether err is a transition's refusal rather than a
// failure of the database.
func refusal(err error) bool {
	return errors.Is(err, backends.ErrNotFound) || errors.Is(err, backends.ErrLockNotAcquired)
}

// inList makes "?, ?, ?" for n values.
func inList(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func (s *Store) Claim(ctx context.Context, c backends.Claim) ([]*backends.Message, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Limit <= 0 {
		return nil, nil
	}
	var out []*backends.Message
	err := s.tx(ctx, func(tx *sql.Tx) error {
		out = nil
		query := "SELECT " + messageCols + " FROM emails WHERE status = ? AND queue_at <= ?"
		args := []any{c.From, c.Now.UTC()}
		if c.From == backends.StatusReady {
			codes, err := suspended(ctx, tx)
			if err != nil {
				return err
			}
			if len(codes) > 0 {
				query += " AND (batch_code IS NULL OR batch_code NOT IN (" + inList(len(codes)) + "))"
				for _, code := range codes {
					args = append(args, code)
				}
			}
		}
		query += " ORDER BY priority, queue_at, created_at, id LIMIT ? FOR UPDATE SKIP LOCKED"
		args = append(args, c.Limit)
		msgs, err := queryMessages(ctx, tx, query, args...)
		if err != nil || len(msgs) == 0 {
			return err
		}
		queue, queueArg := queueAt(c.To, time.Time{}, c.Now)
		ids := make([]any, 0, len(msgs)+4)
		ids = append(ids, c.To, c.LeaseUntil.UTC(), c.Now.UTC(), queueArg)
		for _, m := range msgs {
			ids = append(ids, m.ID)
		}
		_, err = tx.ExecContext(ctx, `UPDATE emails SET status = ?, version = version + 1, lease_until = ?, updated_at = ?,
			queue_at = `+queue+` WHERE id IN (`+inList(len(msgs))+`)`, ids...)
		if err != nil {
			return err
		}
		var b strings.Builder
		b.WriteString("INSERT INTO email_statuses (email_id, status, reason, created_at) VALUES ")
		hist := make([]any, 0, 4*len(msgs))
		for i, m := range msgs {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?)")
			hist = append(hist, m.ID, c.To, null(c.Reason), c.Now.UTC())
			m.Status, m.Version, m.LeaseUntil, m.UpdatedAt = c.To, m.Version+1, c.LeaseUntil, c.Now
		}
		if _, err := tx.ExecContext(ctx, b.String(), hist...); err != nil {
			return err
		}
		out = msgs
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", c.From, err)
	}
	return out, nil
}

const restoreChunk = 500

// anyOf makes the statuses arguments of an IN list.
func anyOf(ss []backends.Status) []any {
	out := make([]any, len(ss))
	for i, st := range ss {
		out[i] = st
	}
	return out
}

func (s *Store) Restore(ctx context.Context, expiredBefore time.Time) (int, error) {
	total := 0
	for {
		n := 0
		now := time.Now().UTC()
		err := s.tx(ctx, func(tx *sql.Tx) error {
			n = 0
			working := anyOf(backends.WorkingStatuses())
			msgs, err := queryMessages(ctx, tx, "SELECT "+messageCols+" FROM emails WHERE lease_until < ? AND status IN ("+
				inList(len(working))+") ORDER BY lease_until LIMIT ? FOR UPDATE SKIP LOCKED",
				append(append([]any{clamp(expiredBefore)}, working...), restoreChunk)...)
			if err != nil {
				return err
			}
			var h history
			for _, m := range msgs {
				if err := transition(ctx, tx, backends.RestoreTransition(m, now), &h); err != nil {
					return err
				}
			}
			if err := h.flush(ctx, tx); err != nil {
				return err
			}
			// backends.RestoreEvent, for every expired event at once.
			res, err := tx.ExecContext(ctx, `UPDATE email_events SET state = 'pending', lease_until = NULL, due_at = ?, updated_at = ?
				WHERE state = 'calling' AND lease_until < ? LIMIT ?`, now, now, clamp(expiredBefore), restoreChunk)
			if err != nil {
				return err
			}
			ne, _ := res.RowsAffected()
			n = len(msgs) + int(ne)
			return nil
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("restore: %w", err)
		}
		if n == 0 {
			return total, nil
		}
	}
}

// clamp keeps a time within what DATETIME holds.
func clamp(t time.Time) time.Time {
	if max := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC); t.After(max) {
		return max
	}
	return t.UTC()
}

func (s *Store) Purge(ctx context.Context, cutoff time.Time, limit int) ([]*backends.Message, error) {
	var out []*backends.Message
	err := s.tx(ctx, func(tx *sql.Tx) error {
		acked := anyOf(backends.AcknowledgedStatuses())
		msgs, err := queryMessages(ctx, tx, "SELECT "+messageCols+" FROM emails WHERE status IN ("+inList(len(acked))+
			") AND updated_at < ? ORDER BY updated_at LIMIT ? FOR UPDATE SKIP LOCKED", append(acked, cutoff.UTC(), limit)...)
		if err != nil || len(msgs) == 0 {
			out = nil
			return err
		}
		ids := make([]any, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		// History, events, links and alarms go with the rows (ON DELETE
		// CASCADE).
		if _, err := tx.ExecContext(ctx, "DELETE FROM emails WHERE id IN ("+inList(len(ids))+")", ids...); err != nil {
			return err
		}
		out = msgs
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("purge: %w", err)
	}
	return out, nil
}
