package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/genropy/postino/backends"
)

const eventCols = `event_id, email_id, seq, outcome, reason, at, details, state, attempts, due_at, lease_until, last_error, acked, updated_at`

func scanEvent(r scanner) (*backends.Event, error) {
	var (
		e                              backends.Event
		reason, details, lastErr, acks sql.NullString
		lease                          sql.NullTime
	)
	err := r.Scan(&e.ID, &e.MessageID, &e.Seq, &e.Outcome, &reason, &e.At, &details, &e.State, &e.Attempts,
		&e.DueAt, &lease, &lastErr, &acks, &e.UpdatedAt)
	if err != nil {
		return nil, err
	}
	e.ID, e.MessageID = strings.TrimRight(e.ID, " "), strings.TrimRight(e.MessageID, " ")
	e.Reason, e.LastError, e.LeaseUntil = reason.String, lastErr.String, lease.Time
	if details.Valid && details.String != "" {
		e.Details = json.RawMessage(details.String)
	}
	if acks.Valid && acks.String != "" {
		if err := json.Unmarshal([]byte(acks.String), &e.Acked); err != nil {
			return nil, fmt.Errorf("event %s: stored acknowledgements are unreadable: %w", e.ID, err)
		}
	}
	return &e, nil
}

func queryEvents(ctx context.Context, q querier, query string, args ...any) ([]*backends.Event, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*backends.Event
	for rows.Next() {
		e, err := scanEvent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

func nullJSON(v []string) sql.NullString {
	if v == nil {
		return sql.NullString{}
	}
	b, _ := json.Marshal(v)
	return sql.NullString{String: string(b), Valid: true}
}

// insertEvent stores a new event of message id; the caller holds the
// message's row lock, so the sequence number cannot be taken twice.
func insertEvent(ctx context.Context, tx *sql.Tx, id string, e *backends.Event, at time.Time) error {
	if err := e.Prepare(id, at); err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(seq), 0) + 1 FROM email_events WHERE email_id = ?", id).Scan(&e.Seq); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO email_events ("+eventCols+") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
		e.ID, id, e.Seq, e.Outcome, null(e.Reason), e.At.UTC(), nullBytes(e.Details), e.State, e.Attempts,
		e.DueAt.UTC(), nullTime(e.LeaseUntil), null(e.LastError), nullJSON(e.Acked), e.UpdatedAt.UTC())
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 {
		return fmt.Errorf("event %s: %w", e.ID, backends.ErrDuplicate)
	}
	return err
}

func (s *Store) AddEvent(ctx context.Context, e *backends.Event) error {
	now := time.Now().UTC()
	err := s.tx(ctx, func(tx *sql.Tx) error {
		if _, err := getMessage(ctx, tx, e.MessageID, " FOR UPDATE"); err != nil {
			return err
		}
		return insertEvent(ctx, tx, e.MessageID, e, now)
	})
	if err != nil {
		return fmt.Errorf("add event to %s: %w", e.MessageID, err)
	}
	return nil
}

func (s *Store) Events(ctx context.Context, messageID string) ([]*backends.Event, error) {
	out, err := queryEvents(ctx, s.db, "SELECT "+eventCols+" FROM email_events WHERE email_id = ? ORDER BY seq", messageID)
	if err == nil && len(out) == 0 {
		_, err = s.Get(ctx, messageID)
	}
	return out, err
}

func (s *Store) EventsByState(ctx context.Context, state backends.EventState, limit int) ([]*backends.Event, error) {
	return queryEvents(ctx, s.db, "SELECT "+eventCols+" FROM email_events WHERE state = ? ORDER BY updated_at, event_id LIMIT ?", state, limit)
}

func (s *Store) ClaimEvents(ctx context.Context, c backends.EventClaim) ([]*backends.Event, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	var out []*backends.Event
	err := s.tx(ctx, func(tx *sql.Tx) error {
		out = nil
		// First the candidates, without locks: an event first in line stays
		// so, since an acknowledged event never goes back. Then lock those
		// still pending; another relay may have taken some.
		pick := eventPickStmt(c)
		rows, err := tx.QueryContext(ctx, pick.query, pick.args...)
		if err != nil {
			return err
		}
		ids, err := scanIDs(rows)
		if err != nil || len(ids) == 0 {
			return err
		}
		lock := eventLockStmt(ids)
		events, err := queryEvents(ctx, tx, lock.query, lock.args...)
		if err != nil {
			return err
		}
		slices.SortStableFunc(events, func(a, b *backends.Event) int {
			return cmp.Or(a.DueAt.Compare(b.DueAt), cmp.Compare(a.Seq, b.Seq))
		})
		etx := eventTx{ctx, tx, &changes{}}
		taken := map[string]bool{}
		for _, e := range events {
			if taken[e.MessageID] {
				continue
			}
			taken[e.MessageID] = true
			claimed, err := backends.ClaimEvent(etx, e, c)
			if err != nil {
				return err
			}
			out = append(out, claimed)
		}
		return etx.h.flush(ctx, tx)
	})
	if err != nil {
		return nil, fmt.Errorf("claim events: %w", err)
	}
	return out, nil
}

// eventPickStmt reads the due pending events first in line for their
// message, in claim order (idx_state_due_seq; the earlier events of each
// through idx_email_seq).
func eventPickStmt(c backends.EventClaim) stmt {
	return stmt{`SELECT e.event_id FROM email_events e
		WHERE e.state = 'pending' AND e.due_at <= ? AND NOT EXISTS (
			SELECT 1 FROM email_events p WHERE p.email_id = e.email_id AND p.seq < e.seq AND p.state <> 'acked')
		ORDER BY e.due_at, e.seq LIMIT ?`, []any{c.Now.UTC(), c.Limit}}
}

// eventLockStmt locks the picked events still pending, skipping those
// another relay holds.
func eventLockStmt(ids []any) stmt {
	return stmt{"SELECT " + eventCols + " FROM email_events WHERE event_id IN (" + inList(len(ids)) +
		") AND state = 'pending' FOR UPDATE SKIP LOCKED", ids}
}

func scanIDs(rows *sql.Rows) ([]any, error) {
	defer rows.Close()
	var ids []any
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

func (s *Store) UpdateEvent(ctx context.Context, u backends.EventUpdate) (*backends.Event, error) {
	if err := u.Prepare(time.Now().UTC()); err != nil {
		return nil, err
	}
	var out *backends.Event
	err := s.tx(ctx, func(tx *sql.Tx) error {
		etx := eventTx{ctx, tx, &changes{}}
		var err error
		if out, err = backends.UpdateEvent(etx, u); err != nil {
			return err
		}
		return etx.h.flush(ctx, tx)
	})
	if err != nil {
		return nil, fmt.Errorf("event %s %s to %s: %w", u.ID, u.From, u.To, err)
	}
	return out, nil
}

// eventTx is a MySQL transaction as backends' event rules see it; the rows
// it reads stay locked until the commit. The moves' history and counts
// gather in h, which the transaction flushes last.
type eventTx struct {
	ctx context.Context
	tx  *sql.Tx
	h   *changes
}

func (t eventTx) Event(id string) (*backends.Event, error) {
	events, err := queryEvents(t.ctx, t.tx, "SELECT "+eventCols+" FROM email_events WHERE event_id = ? FOR UPDATE", id)
	if err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, fmt.Errorf("event %s: %w", id, backends.ErrNotFound)
	}
	return events[0], nil
}

func (t eventTx) PutEvent(_, e *backends.Event) error {
	_, err := t.tx.ExecContext(t.ctx, `UPDATE email_events SET state = ?, updated_at = ?, lease_until = ?, acked = ?,
		attempts = ?, due_at = ?, last_error = ? WHERE event_id = ?`,
		e.State, e.UpdatedAt.UTC(), nullTime(e.LeaseUntil), nullJSON(e.Acked), e.Attempts, e.DueAt.UTC(), null(e.LastError), e.ID)
	return err
}

func (t eventTx) Status(id string) (backends.Status, error) {
	var st backends.Status
	err := t.tx.QueryRowContext(t.ctx, "SELECT status FROM emails WHERE id = ? FOR UPDATE", id).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("message %s: %w", id, backends.ErrNotFound)
	}
	return st, err
}

func (t eventTx) Move(tr backends.Transition) error {
	return transition(t.ctx, t.tx, tr, t.h)
}
