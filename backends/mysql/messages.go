package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// Create goes through the group commit, with the writes of other
// callers.
func (s *Store) Create(ctx context.Context, m *backends.Message) error {
	return s.commits.Create(ctx, m)
}

func (s *Store) Get(ctx context.Context, id string) (*backends.Message, error) {
	return getMessage(ctx, s.db, id)
}

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

func (s *Store) List(ctx context.Context, q backends.ListQuery) ([]*backends.Message, string, error) {
	return sqlstore.ListPages(q, func(q backends.ListQuery, after *sqlstore.ListKey) ([]sqlstore.Listed, error) {
		if q.Status != "" {
			return s.listStatus(ctx, q, after)
		}
		return s.listAll(ctx, q, after)
	})
}

// listStatus lists a status in claim order, from the claim index: one range
// per value of claim_held (READY's held messages are listed too), each read
// from the cursor on in index order and merged. The cursor's comparison is
// spelled out, because MariaDB reads no index range for a row constructor's.
func (s *Store) listStatus(ctx context.Context, q backends.ListQuery, after *sqlstore.ListKey) ([]sqlstore.Listed, error) {
	helds := []int{0}
	if q.Status == backends.StatusReady {
		helds = append(helds, 1)
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
// from the cursor on: the page's ids from the claim index alone, then
// their rows. (Reading the rows while walking the index, MariaDB reads the
// whole status through its equalities, ignoring the cursor's range.)
func listStatusStmt(q backends.ListQuery, after *sqlstore.ListKey, held int) stmt {
	query := "SELECT id FROM emails WHERE status = ? AND claim_held = ?"
	args := []any{q.Status, held}
	if after != nil {
		query += ` AND (priority > ? OR (priority = ? AND (queue_at > ? OR (queue_at = ? AND
			(created_at > ? OR (created_at = ? AND id > ?))))))`
		args = append(args, after.Priority, after.Priority, after.At, after.At, after.Created, after.Created, after.ID)
	}
	return stmt{Query: "SELECT " + messageCols + ", queue_at FROM emails JOIN (" + query +
		" ORDER BY priority, queue_at, created_at, id LIMIT ?) page USING (id)", Args: append(args, q.PageSize()+1)}
}

// listAll lists every message, newest first.
func (s *Store) listAll(ctx context.Context, q backends.ListQuery, after *sqlstore.ListKey) ([]sqlstore.Listed, error) {
	return s.listed(ctx, listAllStmt(q, after))
}

// listAllStmt reads a page of every message from the cursor on
// (idx_created, whose entries end with the id).
func listAllStmt(q backends.ListQuery, after *sqlstore.ListKey) stmt {
	query := "SELECT " + messageCols + ", queue_at FROM emails"
	var args []any
	if after != nil {
		query += " WHERE created_at < ? OR (created_at = ? AND id < ?)"
		args = append(args, after.Created, after.Created, after.ID)
	}
	return stmt{Query: query + " ORDER BY created_at DESC, id DESC LIMIT ?", Args: append(args, q.PageSize()+1)}
}

func (s *Store) listed(ctx context.Context, st stmt) ([]sqlstore.Listed, error) {
	rows, err := s.db.QueryContext(ctx, st.Query, st.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []sqlstore.Listed
	for rows.Next() {
		var qa time.Time
		m, err := scanMessage(rowWith{rows, &qa})
		if err != nil {
			return nil, err
		}
		out = append(out, sqlstore.ListedAt(m, qa))
	}
	return out, rows.Err()
}

// rowWith scans the message columns and one more.
type rowWith struct {
	r     scanner
	extra any
}

func (r rowWith) Scan(dest ...any) error { return r.r.Scan(append(dest, r.extra)...) }

// countsQuery sums the counters of each status (PRIMARY, in its order).
const countsQuery = "SELECT status, SUM(n) FROM email_counts GROUP BY status"

// Counts sums the counters that every change keeps (email_counts): it
// reads a few rows per status, whatever the number of messages.
func (s *Store) Counts(ctx context.Context) (map[backends.Status]int, error) {
	rows, err := s.db.QueryContext(ctx, countsQuery)
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
		if n != 0 {
			out[st] = n
		}
	}
	return out, rows.Err()
}
