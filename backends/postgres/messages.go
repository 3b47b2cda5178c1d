package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

const messageCols = `id, status, eml_file_path, payload_file_path, reason, version, created_at, updated_at,
	message_id, priority, batch_code, due_at, attempts, lease_until, route, envelope, results`

func scanMessage(r pgx.Row, extra ...any) (*backends.Message, error) {
	var (
		m                                                       backends.Message
		eml, payload, reason, msgid, batch, route, env, results *string
		due, lease                                              *time.Time
		priority                                                int16
	)
	err := r.Scan(append([]any{&m.ID, &m.Status, &eml, &payload, &reason, &m.Version, &m.CreatedAt, &m.UpdatedAt,
		&msgid, &priority, &batch, &due, &m.Attempts, &lease, &route, &env, &results}, extra...)...)
	if err != nil {
		return nil, err
	}
	m.Priority = int(priority)
	m.EmlPath, m.PayloadPath, m.Reason, m.MessageID, m.Batch, m.Route = str(eml), str(payload), str(reason), str(msgid), str(batch), str(route)
	m.DueAt, m.LeaseUntil = tm(due), tm(lease)
	if s := str(env); s != "" {
		if err := json.Unmarshal([]byte(s), &m.Envelope); err != nil {
			return nil, fmt.Errorf("message %s: stored envelope is unreadable: %w", m.ID, err)
		}
	}
	if s := str(results); s != "" {
		if err := json.Unmarshal([]byte(s), &m.Results); err != nil {
			return nil, fmt.Errorf("message %s: stored results are unreadable: %w", m.ID, err)
		}
	}
	return &m, nil
}

func queryMessages(ctx context.Context, q querier, st stmt) ([]*backends.Message, error) {
	return queryRows(ctx, q, st, func(r pgx.Row) (*backends.Message, error) { return scanMessage(r) })
}

// queryRows runs st and reads its rows with scan.
func queryRows[T any](ctx context.Context, q querier, st stmt, scan func(pgx.Row) (T, error)) ([]T, error) {
	rows, err := q.Query(ctx, st.Query, st.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Create goes through the group commit, with the writes of other
// callers.
func (s *Store) Create(ctx context.Context, m *backends.Message) error {
	return s.commits.Create(ctx, m)
}

func (s *Store) Get(ctx context.Context, id string) (*backends.Message, error) {
	m, err := scanMessage(s.pool.QueryRow(ctx, "SELECT "+messageCols+" FROM emails WHERE id = $1", id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("message %s: %w", id, backends.ErrNotFound)
	}
	return m, err
}

func (s *Store) History(ctx context.Context, id string) ([]backends.HistoryEntry, error) {
	rows, err := s.pool.Query(ctx, "SELECT status, reason, created_at, details FROM email_statuses WHERE email_id = $1 ORDER BY id", id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []backends.HistoryEntry
	for rows.Next() {
		var e backends.HistoryEntry
		var reason, details *string
		if err := rows.Scan(&e.Status, &reason, &e.At, &details); err != nil {
			return nil, err
		}
		e.Reason = str(reason)
		if d := str(details); d != "" {
			e.Details = json.RawMessage(d)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		if _, err := s.Get(ctx, id); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) ByMessageID(ctx context.Context, messageID string) ([]*backends.Message, error) {
	return queryMessages(ctx, s.pool, stmt{Query: "SELECT " + messageCols + " FROM emails WHERE message_id = $1 ORDER BY created_at, id", Args: []any{messageID}})
}

func (s *Store) List(ctx context.Context, q backends.ListQuery) ([]*backends.Message, string, error) {
	return sqlstore.ListPages(q, func(q backends.ListQuery, after *sqlstore.ListKey) ([]sqlstore.Listed, error) {
		if q.Status != "" {
			return s.listStatus(ctx, q, after)
		}
		return s.listed(ctx, listAllStmt(q, after))
	})
}

// listStatus lists a status in claim order, from the claim index: one range
// per value of claim_held (READY's held messages are listed too), each read
// from the cursor on in index order, and merged.
func (s *Store) listStatus(ctx context.Context, q backends.ListQuery, after *sqlstore.ListKey) ([]sqlstore.Listed, error) {
	helds := []bool{false}
	if q.Status == backends.StatusReady {
		helds = append(helds, true)
	}
	var out []sqlstore.Listed
	for _, held := range helds {
		page, err := s.listed(ctx, listStatusStmt(q, after, held))
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
	}
	sqlstore.SortListed(out)
	return out, nil
}

// listStatusStmt reads a page of q.Status's messages of one claim_held
// from the cursor on, a range of idx_claim (a row comparison is an index
// condition in PostgreSQL).
func listStatusStmt(q backends.ListQuery, after *sqlstore.ListKey, held bool) stmt {
	query := "SELECT " + messageCols + ", queue_at FROM emails WHERE status = $1 AND claim_held = $2"
	args := []any{q.Status, held, q.PageSize() + 1}
	if after != nil {
		query += " AND (priority, queue_at, created_at, id) > ($4, $5, $6, $7)"
		args = append(args, after.Priority, ts(after.At), ts(after.Created), after.ID)
	}
	return stmt{Query: query + " ORDER BY priority, queue_at, created_at, id LIMIT $3", Args: args}
}

// listAllStmt reads a page of every message from the cursor on, newest
// first (idx_created).
func listAllStmt(q backends.ListQuery, after *sqlstore.ListKey) stmt {
	query := "SELECT " + messageCols + ", queue_at FROM emails"
	args := []any{q.PageSize() + 1}
	if after != nil {
		query += " WHERE (created_at, id) < ($2, $3)"
		args = append(args, ts(after.Created), after.ID)
	}
	return stmt{Query: query + " ORDER BY created_at DESC, id DESC LIMIT $1", Args: args}
}

func (s *Store) listed(ctx context.Context, st stmt) ([]sqlstore.Listed, error) {
	rows, err := s.pool.Query(ctx, st.Query, st.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sqlstore.Listed
	for rows.Next() {
		var qa time.Time
		m, err := scanMessage(rows, &qa)
		if err != nil {
			return nil, err
		}
		out = append(out, sqlstore.ListedAt(m, qa))
	}
	return out, rows.Err()
}

// countsQuery sums the counters of each status (their primary key).
const countsQuery = "SELECT status, SUM(n)::bigint FROM email_counts GROUP BY status"

// Counts sums the counters that every change keeps (email_counts): it
// reads a few rows per status, whatever the number of messages.
func (s *Store) Counts(ctx context.Context) (map[backends.Status]int, error) {
	rows, err := s.pool.Query(ctx, countsQuery)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[backends.Status]int{}
	for rows.Next() {
		var st backends.Status
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		if n != 0 {
			out[st] = int(n)
		}
	}
	return out, rows.Err()
}
