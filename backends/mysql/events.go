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
	"github.com/genropy/postino/backends/internal/sqlstore"
	"github.com/go-sql-driver/mysql"
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
	return queryAll(ctx, q, scanEvent, query, args...)
}

func nullJSON(v []string) sql.NullString {
	if v == nil {
		return sql.NullString{}
	}
	b, _ := json.Marshal(v)
	return sql.NullString{String: string(b), Valid: true}
}

func (s *Store) AddEvent(ctx context.Context, e *backends.Event) error {
	now := time.Now().UTC()
	err := s.tx(ctx, func(tx *txn) error {
		w := newTxRows(ctx, tx)
		if err := sqlstore.AddHeldEvent(w, e, now); err != nil {
			return err
		}
		return w.write()
	})
	// The event's id is taken: it was added before (a receipt read again).
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1062 {
		err = backends.ErrDuplicate
	}
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
	// First the candidates, without locks and outside the transaction, so
	// that finding none costs one read: an event first in line stays so,
	// since an acknowledged event never goes back. Then lock those still
	// pending; another relay may have taken some.
	pick := eventPickStmt(c)
	rows, err := s.db.QueryContext(ctx, pick.Query, pick.Args...)
	if err != nil {
		return nil, fmt.Errorf("claim events: %w", err)
	}
	ids, err := scanIDs(rows)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	var out []*backends.Event
	err = s.tx(ctx, func(tx *txn) error {
		w := newTxRows(ctx, tx)
		var err error
		if out, err = sqlstore.ClaimHeldEvents(w, ids, c); err != nil {
			return err
		}
		return w.write()
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
	return stmt{Query: `SELECT e.event_id FROM email_events e
		WHERE e.state = 'pending' AND e.due_at <= ? AND NOT EXISTS (
			SELECT 1 FROM email_events p WHERE p.email_id = e.email_id AND p.seq < e.seq AND p.state <> 'acked')
		ORDER BY e.due_at, e.seq LIMIT ?`, Args: []any{c.Now.UTC(), c.Limit}}
}

// eventLockStmt reads and locks events by id, in id order; skip passes
// over those another transaction holds.
func eventLockStmt(ids []any, skip bool) stmt {
	q := "SELECT " + eventCols + " FROM email_events WHERE event_id IN (" + inList(len(ids)) + ") ORDER BY event_id FOR UPDATE"
	if skip {
		q += " SKIP LOCKED"
	}
	return stmt{Query: q, Args: ids}
}

func scanIDs(rows *sql.Rows) ([]string, error) {
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, strings.TrimRight(id, " "))
	}
	return ids, rows.Err()
}

// UpdateEvent goes through the group commit, with the updates and
// transitions of other callers.
func (s *Store) UpdateEvent(ctx context.Context, u backends.EventUpdate) (*backends.Event, error) {
	return s.commits.UpdateEvent(ctx, u)
}
