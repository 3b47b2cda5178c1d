package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

const messageCols = `id, status, eml_file_path, payload_file_path, reason, version, created_at, updated_at,
	message_id, priority, batch_code, due_at, attempts, lease_until, route, envelope, results`

// scanMessage reads a row of messageCols, then extra.
func scanMessage(r sqlstore.Scanner, extra ...any) (*backends.Message, error) {
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
	return sqlstore.QueryAll(ctx, pgDB{q}, scanOne, st)
}

// scanOne reads a row of messageCols.
func scanOne(r sqlstore.Scanner) (*backends.Message, error) { return scanMessage(r) }

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
	return stmt{Query: "SELECT " + messageCols + " FROM emails WHERE id = $1", Args: []any{id}}
}

func (s *Store) History(ctx context.Context, id string) ([]backends.HistoryEntry, error) {
	return s.sql.History(ctx, id, stmt{Query: "SELECT status, reason, created_at, details FROM email_statuses WHERE email_id = $1 ORDER BY id", Args: []any{id}})
}

func (s *Store) ByMessageID(ctx context.Context, messageID string) ([]*backends.Message, error) {
	return s.sql.ByMessageID(ctx, stmt{Query: "SELECT " + messageCols + " FROM emails WHERE message_id = $1 ORDER BY created_at, id", Args: []any{messageID}})
}

// listing reads List's pages (sqlstore.List).
var listing = sqlstore.Listing{Status: listStatusStmt, All: listAllStmt, Batch: listBatchStmt}

func (s *Store) List(ctx context.Context, q backends.ListQuery) ([]*backends.Message, string, error) {
	return s.sql.List(ctx, listing, q)
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

// listBatchStmt reads a page of q.Batch's messages, of q.Status when set,
// from the cursor on, in id order: a range of idx_batch (batch_code, id),
// the status a filter of the rows. The cursor is a row comparison, an
// index condition of idx_batch alone: with "id > $n" the planner may walk
// the primary key instead, filtering the other batches' rows out.
func listBatchStmt(q backends.ListQuery, after *sqlstore.ListKey) stmt {
	query := "SELECT " + messageCols + ", queue_at FROM emails WHERE batch_code = $1"
	args := []any{q.Batch, q.PageSize() + 1}
	if q.Status != "" {
		args = append(args, q.Status)
		query += " AND status = $" + strconv.Itoa(len(args))
	}
	if after != nil {
		args = append(args, after.ID)
		query += " AND (batch_code, id) > ($1, $" + strconv.Itoa(len(args)) + ")"
	}
	return stmt{Query: query + " ORDER BY id LIMIT $2", Args: args}
}

// countsQuery sums the counters of each status (their primary key).
const countsQuery = "SELECT status, SUM(n)::bigint FROM email_counts GROUP BY status"

// Counts sums the counters that every change keeps (email_counts): it
// reads a few rows per status, whatever the number of messages.
func (s *Store) Counts(ctx context.Context) (map[backends.Status]int, error) {
	return s.sql.Counts(ctx, stmt{Query: countsQuery})
}
