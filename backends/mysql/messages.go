package mysql

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
)

func (s *Store) Create(ctx context.Context, m *backends.Message) error {
	if err := m.PrepareCreate(time.Now().UTC()); err != nil {
		return err
	}
	m.Version = 1
	if err := s.submit(ctx, &op{create: m}); err != nil {
		return fmt.Errorf("create message %s: %w", m.ID, err)
	}
	return nil
}

func (s *Store) Get(ctx context.Context, id string) (*backends.Message, error) {
	return getMessage(ctx, s.db, id, "")
}

// querier is a database or a transaction.
func (s *Store) History(ctx context.Context, id string) ([]backends.HistoryEntry, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT status, reason, created_at, details FROM email_statuses WHERE email_id = ? ORDER BY id", id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []backends.HistoryEntry
	for rows.Next() {
		var e backends.HistoryEntry
		var reason, details sql.NullString
		if err := rows.Scan(&e.Status, &reason, &e.At, &details); err != nil {
			return nil, err
		}
		e.Reason = reason.String
		if details.Valid && details.String != "" {
			e.Details = json.RawMessage(details.String)
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
	return queryMessages(ctx, s.db, "SELECT "+messageCols+" FROM emails WHERE message_id = ? ORDER BY created_at, id", messageID)
}

// cursor is where a listing stopped.
type cursor struct {
	Priority int       `json:"p,omitempty"`
	At       time.Time `json:"a"`
	Created  time.Time `json:"c"`
	ID       string    `json:"i"`
}

func (s *Store) List(ctx context.Context, q backends.ListQuery) ([]*backends.Message, string, error) {
	q.Limit = q.PageSize()
	var after *cursor
	if q.After != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.After)
		after = new(cursor)
		if err != nil || json.Unmarshal(b, after) != nil {
			return nil, "", fmt.Errorf("list cursor %q was not given by this store", q.After)
		}
	}
	var query string
	var args []any
	if q.Status != "" {
		query = "SELECT " + messageCols + ", queue_at FROM emails WHERE status = ?"
		args = append(args, q.Status)
		if after != nil {
			query += " AND (priority, queue_at, created_at, id) > (?, ?, ?, ?)"
			args = append(args, after.Priority, after.At, after.Created, after.ID)
		}
		query += " ORDER BY priority, queue_at, created_at, id LIMIT ?"
	} else {
		query = "SELECT " + messageCols + ", queue_at FROM emails"
		if after != nil {
			query += " WHERE (created_at, id) < (?, ?)"
			args = append(args, after.Created, after.ID)
		}
		query += " ORDER BY created_at DESC, id DESC LIMIT ?"
	}
	args = append(args, q.Limit+1)
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	var out []*backends.Message
	var last cursor
	for rows.Next() {
		var qa sql.NullTime
		m, err := scanMessage(rowWith{rows, &qa})
		if err != nil {
			return nil, "", err
		}
		if len(out) == q.Limit {
			b, _ := json.Marshal(last)
			return out, base64.RawURLEncoding.EncodeToString(b), rows.Err()
		}
		out = append(out, m)
		last = cursor{Priority: m.Priority, At: qa.Time, Created: m.CreatedAt, ID: m.ID}
	}
	return out, "", rows.Err()
}

// rowWith scans the message columns and one more.
type rowWith struct {
	r     scanner
	extra any
}

func (r rowWith) Scan(dest ...any) error { return r.r.Scan(append(dest, r.extra)...) }

func (s *Store) Counts(ctx context.Context) (map[backends.Status]int, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT status, COUNT(*) FROM emails GROUP BY status")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[backends.Status]int{}
	for rows.Next() {
		var st backends.Status
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[st] = n
	}
	return out, rows.Err()
}
