package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// Transition goes through the group commit, with the writes of other
// callers.
func (s *Store) Transition(ctx context.Context, t backends.Transition) error {
	return s.commits.Transition(ctx, t)
}

// Claim goes through the group commit, with the writes of other callers:
// a look at which priorities hold due messages runs before, outside any
// transaction, so that finding nothing costs one read.
func (s *Store) Claim(ctx context.Context, c backends.Claim) ([]*backends.Message, error) {
	return s.commits.Claim(ctx, c, func(c *backends.Claim) (*op, bool, error) {
		due := claimDueStmt(*c)
		rows, err := s.pool.Query(ctx, due.Query, due.Args...)
		if err != nil {
			return nil, false, err
		}
		prios, err := pgx.CollectRows(rows, pgx.RowTo[int])
		return &op{Write: sqlstore.Write{Claim: c}, prios: prios}, len(prios) > 0, err
	})
}

// priorities are the values of emails.priority, in claim order.
var priorities = []int{backends.PriorityImmediate, backends.PriorityHigh, backends.PriorityNormal, backends.PriorityLow}

// claimDueStmt reads which priorities hold a message the claim may take:
// one probe of idx_claim per priority.
func claimDueStmt(c backends.Claim) stmt {
	return stmt{Query: `SELECT p FROM unnest($3::int[]) p WHERE EXISTS (SELECT 1 FROM emails
		WHERE status = $1 AND claim_held = false AND priority = p AND queue_at <= $2)`,
		Args: []any{c.From, ts(c.Now), priorities}}
}

// claimStmt locks the first n messages of one priority a claim may take, in
// claim order, walking idx_claim and skipping the rows other transactions
// hold (SKIP LOCKED) and those this one holds for other writes (mine).
func claimStmt(c backends.Claim, priority, n int, mine []string) stmt {
	return stmt{Query: "SELECT " + messageCols + ` FROM emails
		WHERE status = $1 AND claim_held = false AND priority = $2 AND queue_at <= $3 AND id <> ALL($4)
		ORDER BY queue_at, created_at, id LIMIT $5 FOR UPDATE SKIP LOCKED`,
		Args: []any{c.From, priority, ts(c.Now), mine, n}}
}

// lockClaims is the sqlstore.ClaimFunc of the group commit: the claims
// together look at the priorities any of them found due.
func (w *txRows) lockClaims(all backends.Claim, same []*op) ([]*backends.Message, error) {
	due := map[int]bool{}
	for _, o := range same {
		for _, p := range o.prios {
			due[p] = true
		}
	}
	return w.lockClaimable(all, due)
}

// lockClaimable locks up to c.Limit messages of the due priorities, in
// claim order: a statement per priority, until the claim is full.
func (w *txRows) lockClaimable(c backends.Claim, due map[int]bool) ([]*backends.Message, error) {
	mine := make([]string, 0, len(w.Messages))
	for id := range w.Messages {
		mine = append(mine, id)
	}
	var out []*backends.Message
	for _, p := range priorities {
		if !due[p] || len(out) == c.Limit {
			continue
		}
		msgs, err := queryMessages(w.ctx, w.tx, claimStmt(c, p, c.Limit-len(out), mine))
		if err != nil {
			return nil, err
		}
		out = append(out, msgs...)
	}
	w.Adopt(out)
	return out, nil
}

const restoreChunk = 500

// strs makes statuses, or activities, the values of a text[].
func strs[S ~string](ss []S) []string {
	out := make([]string, len(ss))
	for i, st := range ss {
		out[i] = string(st)
	}
	return out
}

func (s *Store) Restore(ctx context.Context, expiredBefore time.Time) (int, error) {
	return s.sql.Restore(ctx, expiredBefore, restoreEventsStmt, restoreStmt(expiredBefore))
}

// restoreStmt locks only the working rows whose lease ran out
// (idx_status_lease), status by status (inStatuses).
func restoreStmt(expiredBefore time.Time) stmt {
	return stmt{Query: inStatuses("lease_until < $2 ORDER BY lease_until"), Args: []any{strs(backends.WorkingStatuses()), ts(expiredBefore), restoreChunk}}
}

// inStatuses locks up to $3 messages whose status is one of $1 and which
// where selects, a range of an index that starts with the status, per
// status: a status = ANY($1) over the whole index lets the planner choose
// a scan of the table where it expects many rows, and the rows it would
// read are then those in its way.
func inStatuses(where string) string {
	return `SELECT m.* FROM unnest($1::text[]) s, LATERAL (SELECT ` + messageCols + ` FROM emails
		WHERE status = s AND ` + where + ` LIMIT $3 FOR UPDATE SKIP LOCKED) m LIMIT $3`
}

// restoreEventsStmt is backends.RestoreEvent, for the expired events at
// once (idx_state_lease).
func restoreEventsStmt(now, expiredBefore time.Time) stmt {
	return stmt{Query: `UPDATE email_events e SET state = 'pending', lease_until = NULL, due_at = $1, updated_at = $1
		FROM (SELECT event_id FROM email_events WHERE state = 'calling' AND lease_until < $2
			LIMIT $3 FOR UPDATE SKIP LOCKED) x WHERE e.event_id = x.event_id`, Args: []any{ts(now), ts(expiredBefore), restoreChunk}}
}

func (s *Store) Purge(ctx context.Context, cutoff time.Time, limit int) ([]*backends.Message, error) {
	var out []*backends.Message
	err := s.tx(ctx, func(tx pgx.Tx) error {
		out = nil
		msgs, err := queryMessages(ctx, tx, purgeStmt(cutoff, limit))
		if err != nil || len(msgs) == 0 {
			return err
		}
		ids, h := sqlstore.Purged(msgs)
		// History, events, links, alarms, bodies and receipts go with the
		// rows (ON DELETE CASCADE).
		b := &pgx.Batch{}
		b.Queue("DELETE FROM emails WHERE id = ANY($1)", ids)
		flushChanges(b, h)
		out = msgs
		return sendBatch(ctx, tx, b)
	})
	if err != nil {
		return nil, fmt.Errorf("purge: %w", err)
	}
	return out, nil
}

// purgeStmt locks only the acknowledged rows older than cutoff, the
// oldest of each status first (idx_status_updated).
func purgeStmt(cutoff time.Time, limit int) stmt {
	return stmt{Query: inStatuses("updated_at < $2 ORDER BY updated_at"), Args: []any{strs(backends.AcknowledgedStatuses()), ts(cutoff), limit}}
}
