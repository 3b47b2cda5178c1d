package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// Transition goes through the group commit, with the writes of other
// callers.
func (s *Store) Transition(ctx context.Context, t backends.Transition) error {
	return s.commits.Transition(ctx, t)
}

// countShards is the number of counter rows of a status: a transaction
// picks one at random, so that concurrent ones seldom share a row.
const countShards = 16

// changesStmts returns the history insert and the counters' updates of c
// (by status, and the activities of this minute), and forgets them: one
// statement a table whatever the number of messages, in the shard of the
// counters that the transaction picks.
func changesStmts(c *backends.Changes) []stmt {
	history, statuses, deltas := c.Take()
	acts, ns := c.TakeActivities()
	var out []stmt
	if len(history) > 0 {
		args := make([]any, 0, 5*len(history))
		for _, h := range history {
			args = append(args, h.MessageID, h.Status, null(h.Reason), h.At.UTC(), nullBytes(h.Details))
		}
		out = append(out, stmt{Query: "INSERT INTO email_statuses (email_id, status, reason, created_at, details) VALUES " +
			rowsOf(5, len(history)), Args: args})
	}
	shard := rand.N(countShards)
	if len(statuses) > 0 {
		args := make([]any, 0, 3*len(statuses))
		for i, st := range statuses {
			args = append(args, st, shard, deltas[i])
		}
		out = append(out, stmt{Query: "INSERT INTO email_counts (status, shard, n) VALUES " +
			rowsOf(3, len(statuses)) + " ON DUPLICATE KEY UPDATE n = n + VALUES(n)", Args: args})
	}
	if len(acts) > 0 {
		minute := backends.MinuteOf(time.Now())
		args := make([]any, 0, 4*len(acts))
		for i, a := range acts {
			args = append(args, minute, a, shard, ns[i])
		}
		out = append(out, stmt{Query: "INSERT INTO email_activity (minute, activity, shard, n) VALUES " +
			rowsOf(4, len(acts)) + " ON DUPLICATE KEY UPDATE n = n + VALUES(n)", Args: args})
	}
	return out
}

// execAll runs the statements in one round trip (the connection allows
// several statements a query: Connect), in order; the server stops at the
// first that fails, and that failure is the error. Empty ones are left
// out.
func execAll(ctx context.Context, tx querier, stmts []stmt) error {
	all := joinStmts(stmts)
	if all.Query == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, all.Query, all.Args...)
	return err
}

// joinStmts makes one query of the statements, in order, leaving out the
// empty ones.
func joinStmts(stmts []stmt) stmt {
	var (
		query strings.Builder
		args  []any
	)
	for _, st := range stmts {
		if st.Query == "" {
			continue
		}
		if query.Len() > 0 {
			query.WriteString(";\n")
		}
		query.WriteString(st.Query)
		args = append(args, st.Args...)
	}
	return stmt{Query: query.String(), Args: args}
}

func nullBytes(b []byte) sql.NullString { return sql.NullString{String: string(b), Valid: len(b) > 0} }

// inList makes "?, ?, ?" for n values.
func inList(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// Claim goes through the group commit, with the writes of other callers:
// its first pick runs before, outside any transaction, so that finding
// nothing costs one read.
func (s *Store) Claim(ctx context.Context, c backends.Claim) ([]*backends.Message, error) {
	return s.commits.Claim(ctx, c, func(c *backends.Claim) (*op, bool, error) {
		cands, err := claimCandidates(ctx, s.db, *c, c.Limit)
		return &op{Write: sqlstore.Write{Claim: c}, cands: cands}, len(cands) > 0, err
	})
}

// claimRounds bounds how many times a claim picks again after other
// claimers locked its candidates first.
const claimRounds = 4

// lockClaims is the sqlstore.ClaimFunc of the group commit: a claim
// alone keeps its first pick, claims together pick again.
func (w *txRows) lockClaims(all backends.Claim, same []*op) ([]*backends.Message, error) {
	var cands []string
	if len(same) == 1 {
		cands = same[0].cands
	}
	return w.lockClaimable(all, cands)
}

// lockClaimable picks, then locks: from the candidates read without locks
// from the claim index (cands, or a pick of its own when nil), it locks
// exactly those, in id order, skipping any that another claimer holds and
// checking again that each is still due and not held. (Locking while
// walking the index made concurrent claimers deadlock.) When others took
// some, it picks again, past them. It returns the messages it holds in
// claim order.
func (w *txRows) lockClaimable(c backends.Claim, cands []string) ([]*backends.Message, error) {
	var out []*backends.Message
	// seen holds the candidates locked already, true, or not to take,
	// false: held by another claimer, or by this transaction for another
	// write. A new pick still reads them all (nothing moves until the
	// end), and skips them.
	seen := map[string]bool{}
	for id := range w.Messages {
		seen[id] = false
	}
	picked := c.Limit // how many the outside pick asked for
	for round := range claimRounds {
		want := c.Limit - len(out)
		if round > 0 || cands == nil {
			picked = want + len(seen)
			var err error
			if cands, err = claimCandidates(w.ctx, w.tx, c, picked); err != nil {
				return nil, err
			}
		}
		var ids []any
		for _, id := range cands {
			if _, ok := seen[id]; !ok && len(ids) < want {
				ids = append(ids, id)
			}
		}
		if len(ids) > 0 {
			lock := claimLockStmt(c, ids)
			locked, err := queryMessages(w.ctx, w.tx, lock)
			if err != nil {
				return nil, err
			}
			out = append(out, locked...)
			for _, id := range ids {
				seen[id.(string)] = false
			}
			for _, m := range locked {
				seen[m.ID] = true
			}
		}
		// Done when full, or when the pick read the whole queue.
		if len(out) == c.Limit || len(cands) < picked {
			break
		}
	}
	slices.SortFunc(out, func(a, b *backends.Message) int {
		return sqlstore.ListedAt(a, a.QueueTime()).Key.Compare(sqlstore.ListedAt(b, b.QueueTime()).Key)
	})
	w.Adopt(out)
	return out, nil
}

// claimPickStmt reads the first n messages a claim may take, in claim
// order, from the claim index alone. The priorities are an IN list, not a
// range: each is then a range of its own, bounded by now, which the server
// reads in the index's order and stops at n (no sort, and no message not
// due is read), in one statement, where a UNION of one per priority cost
// MariaDB twice the time.
func claimPickStmt(c backends.Claim, n int) stmt {
	q := `SELECT id FROM emails
		WHERE status = ? AND claim_held = 0 AND priority IN (` + inList(int(backends.PriorityLow-backends.PriorityImmediate)+1) + `) AND queue_at <= ?
		ORDER BY priority, queue_at, created_at, id LIMIT ?`
	args := []any{c.From}
	for p := backends.PriorityImmediate; p <= backends.PriorityLow; p++ {
		args = append(args, p)
	}
	return stmt{Query: q, Args: append(args, c.Now.UTC(), n)}
}

// claimLockStmt locks the picked messages that are still to be claimed, in
// id order, skipping those another claimer holds.
func claimLockStmt(c backends.Claim, ids []any) stmt {
	return stmt{Query: "SELECT " + messageCols + " FROM emails WHERE id IN (" + inList(len(ids)) +
		") AND status = ? AND claim_held = 0 AND queue_at <= ? ORDER BY id FOR UPDATE SKIP LOCKED",
		Args: append(slices.Clip(ids), c.From, c.Now.UTC())}
}

// claimCandidates reads, without locks, the ids of the first n messages a claim may
// take, in claim order (the statement's).
func claimCandidates(ctx context.Context, q querier, c backends.Claim, n int) ([]string, error) {
	return queryIDs(ctx, q, claimPickStmt(c, n))
}

const restoreChunk = 500

// anyOf makes values the arguments of an IN list.
func anyOf[T any](vs []T) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}

func (s *Store) Restore(ctx context.Context, expiredBefore time.Time) (int, error) {
	return s.sql.Restore(ctx, expiredBefore, restoreEventsStmt, restoreStmt(expiredBefore))
}

// restoreStmt reads only the working rows whose lease ran out
// (idx_status_lease).
func restoreStmt(expiredBefore time.Time) stmt {
	working := anyOf(backends.WorkingStatuses())
	return stmt{Query: "SELECT " + messageCols + " FROM emails WHERE status IN (" + inList(len(working)) +
		") AND lease_until < ? LIMIT ? FOR UPDATE SKIP LOCKED", Args: append(working, clamp(expiredBefore), restoreChunk)}
}

// restoreEventsStmt is backends.RestoreEvent, for the expired events at
// once (idx_state_lease).
func restoreEventsStmt(now, expiredBefore time.Time) stmt {
	return stmt{Query: `UPDATE email_events SET state = 'pending', lease_until = NULL, due_at = ?, updated_at = ?
		WHERE state = 'calling' AND lease_until < ? LIMIT ?`, Args: []any{now, now, clamp(expiredBefore), restoreChunk}}
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
	err := s.tx(ctx, func(tx *txn) error {
		sel := purgeStmt(cutoff, limit)
		msgs, err := queryMessages(ctx, tx, sel)
		if err != nil || len(msgs) == 0 {
			out = nil
			return err
		}
		purged, h := sqlstore.Purged(msgs)
		ids := anyOf(purged)
		// History, events, links and alarms go with the rows (ON DELETE
		// CASCADE).
		if _, err := tx.ExecContext(ctx, "DELETE FROM emails WHERE id IN ("+inList(len(ids))+")", ids...); err != nil {
			return err
		}
		out = msgs
		tx.Last(changesStmts(h)...)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("purge: %w", err)
	}
	return out, nil
}

// purgeStmt reads only the acknowledged rows older than cutoff
// (idx_status_updated); any of them will do, so no sort across the
// statuses.
func purgeStmt(cutoff time.Time, limit int) stmt {
	acked := anyOf(backends.AcknowledgedStatuses())
	return stmt{Query: "SELECT " + messageCols + " FROM emails WHERE status IN (" + inList(len(acked)) +
		") AND updated_at < ? LIMIT ? FOR UPDATE SKIP LOCKED", Args: append(acked, cutoff.UTC(), limit)}
}
