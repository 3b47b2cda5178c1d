package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

const eventCols = `event_id, email_id, seq, outcome, reason, at, details, state, attempts, due_at, lease_until, last_error, acked, updated_at`

func scanEvent(r sqlstore.Scanner) (*backends.Event, error) {
	var (
		e                               backends.Event
		reason, details, lastErr, acked *string
		lease                           *time.Time
		seq                             int32
	)
	err := r.Scan(&e.ID, &e.MessageID, &seq, &e.Outcome, &reason, &e.At, &details, &e.State, &e.Attempts,
		&e.DueAt, &lease, &lastErr, &acked, &e.UpdatedAt)
	if err != nil {
		return nil, err
	}
	e.Seq = int64(seq)
	e.Reason, e.LastError, e.LeaseUntil = str(reason), str(lastErr), tm(lease)
	if d := str(details); d != "" {
		e.Details = json.RawMessage(d)
	}
	if a := str(acked); a != "" {
		if err := json.Unmarshal([]byte(a), &e.Acked); err != nil {
			return nil, fmt.Errorf("event %s: stored acknowledgements are unreadable: %w", e.ID, err)
		}
	}
	return &e, nil
}

func queryEvents(ctx context.Context, q querier, st stmt) ([]*backends.Event, error) {
	return sqlstore.QueryAll(ctx, pgDB{q}, scanEvent, st)
}

func (s *Store) AddEvent(ctx context.Context, e *backends.Event) error { return s.sql.AddEvent(ctx, e) }

func (s *Store) Events(ctx context.Context, messageID string) ([]*backends.Event, error) {
	return s.sql.Events(ctx, messageID, stmt{Query: "SELECT " + eventCols + " FROM email_events WHERE email_id = $1 ORDER BY seq", Args: []any{messageID}})
}

func (s *Store) EventsByState(ctx context.Context, state backends.EventState, limit int) ([]*backends.Event, error) {
	return s.sql.EventsByState(ctx, stmt{Query: "SELECT " + eventCols + " FROM email_events WHERE state = $1 ORDER BY updated_at, event_id LIMIT $2",
		Args: []any{state, limit}})
}

func (s *Store) ClaimEvents(ctx context.Context, c backends.EventClaim) ([]*backends.Event, error) {
	return s.sql.ClaimEvents(ctx, c, eventPickStmt(c))
}

// eventPickStmt reads the due pending events first in line for their
// message, in claim order (idx_state_due_seq; the earlier events of each
// through idx_email_seq).
func eventPickStmt(c backends.EventClaim) stmt {
	return stmt{Query: `SELECT e.event_id FROM email_events e
		WHERE e.state = 'pending' AND e.due_at <= $1 AND NOT EXISTS (
			SELECT 1 FROM email_events p WHERE p.email_id = e.email_id AND p.seq < e.seq AND p.state <> 'acked')
		ORDER BY e.due_at, e.seq LIMIT $2`, Args: []any{ts(c.Now), c.Limit}}
}

// eventLockStmt reads and locks events by id, in id order; skip passes
// over those another transaction holds.
func eventLockStmt(ids []string, skip bool) stmt {
	q := "SELECT " + eventCols + " FROM email_events WHERE event_id = ANY($1) ORDER BY event_id FOR UPDATE"
	if skip {
		q += " SKIP LOCKED"
	}
	return stmt{Query: q, Args: []any{ids}}
}

// UpdateEvent goes through the group commit, with the updates and
// transitions of other callers.
func (s *Store) UpdateEvent(ctx context.Context, u backends.EventUpdate) (*backends.Event, error) {
	return s.commits.UpdateEvent(ctx, u)
}
