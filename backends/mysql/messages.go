package mysql

import (
	"context"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// Create goes through the group commit, with the writes of other
// callers.
func (s *Store) Create(ctx context.Context, m *backends.Message) error {
	return s.commits.Create(ctx, m)
}

func (s *Store) Get(ctx context.Context, id string) (*backends.Message, error) {
	return s.sql.Get(ctx, id)
}

// byIDStmt reads a message by its id.
func byIDStmt(id string) stmt {
	return stmt{Query: "SELECT " + messageCols + " FROM emails WHERE id = ?", Args: []any{id}}
}

func (s *Store) History(ctx context.Context, id string) ([]backends.HistoryEntry, error) {
	return s.sql.History(ctx, id, stmt{Query: "SELECT status, reason, created_at, details FROM email_statuses WHERE email_id = ? ORDER BY id", Args: []any{id}})
}

func (s *Store) ByMessageID(ctx context.Context, messageID string) ([]*backends.Message, error) {
	return s.sql.ByMessageID(ctx, stmt{Query: "SELECT " + messageCols + " FROM emails WHERE message_id = ? ORDER BY created_at, id", Args: []any{messageID}})
}

// listing reads List's pages (sqlstore.List).
var listing = sqlstore.Listing{Status: listStatusStmt, All: listAllStmt, Batch: listBatchStmt}

func (s *Store) List(ctx context.Context, q backends.ListQuery) ([]*backends.Message, string, error) {
	return s.sql.List(ctx, listing, q)
}

// listStatusStmt reads a page of q.Status's messages of one claim_held
// from the cursor on: the page's ids from the claim index alone, then
// their rows. (Reading the rows while walking the index, MariaDB reads the
// whole status through its equalities, ignoring the cursor's range.) The
// cursor's comparison is spelled out, because MariaDB reads no index range
// for a row constructor's.
func listStatusStmt(q backends.ListQuery, after *sqlstore.ListKey, held bool) stmt {
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

// listBatchStmt reads a page of q.Batch's messages, of q.Status when set,
// from the cursor on, in id order: a range of idx_batch, whose entries end
// with the id (InnoDB's primary key), the status a filter of the rows.
func listBatchStmt(q backends.ListQuery, after *sqlstore.ListKey) stmt {
	query := "SELECT " + messageCols + ", queue_at FROM emails FORCE INDEX (idx_batch) WHERE batch_code = ?"
	args := []any{q.Batch}
	if q.Status != "" {
		query += " AND status = ?"
		args = append(args, q.Status)
	}
	if after != nil {
		query += " AND id > ?"
		args = append(args, after.ID)
	}
	return stmt{Query: query + " ORDER BY id LIMIT ?", Args: append(args, q.PageSize()+1)}
}

// countsQuery sums the counters of each status (PRIMARY, in its order).
const countsQuery = "SELECT status, SUM(n) FROM email_counts GROUP BY status"

// Counts sums the counters that every change keeps (email_counts): it
// reads a few rows per status, whatever the number of messages.
func (s *Store) Counts(ctx context.Context) (map[backends.Status]int, error) {
	return s.sql.Counts(ctx, stmt{Query: countsQuery})
}
