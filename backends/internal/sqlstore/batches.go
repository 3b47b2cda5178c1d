package sqlstore

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
)

// BatchStmts builds the statements of batches (tables email_batches and
// batch_tallies, and the held flag of emails) that differ from a store to
// another, each with its arguments. The others are written here, with the
// store's Mark.
type BatchStmts interface {
	// Lock is what a change of a batch's suspension runs first, to order
	// it against the creation of the batch's messages where the row locks
	// do not (none then).
	Lock(code string) []Stmt
	// Suspend makes the batch's row of email_batches, suspended at at,
	// unless it has one: it changes no row then, once a transaction that
	// made it meanwhile has committed.
	Suspend(code string, at time.Time) Stmt
	// Hold sets held on the messages of the batch, or clears it, through
	// idx_batch.
	Hold(code string, held bool) Stmt
	// Tally adds tallies[i]'s counts to the row of codes[i], making the
	// rows missing; codes are sorted, so that relays adding to the same
	// rows lock them in one order.
	Tally(codes []string, tallies []backends.BatchTally) Stmt
	// Trip sets tripped and tripped_at on the batch's tally, making its
	// row when it has none.
	Trip(code, reason string, at time.Time) Stmt
	// Counts reads a status and its number of messages of the batch, for
	// each status it holds, through idx_batch.
	Counts(code string) Stmt
	// Mark is the placeholder of a statement's nth argument, from 1.
	Mark(n int) string
}

// TallyCols are the columns of a tally's row, in the order the reads
// take them.
const TallyCols = "code, messages, sent, hard, complaints, tripped, tripped_at"

// maxTripped bounds the reason of a trip (batch_tallies.tripped).
const maxTripped = 255

// Batches is backends.Batches and backends.BatchTallies in a SQL store, over
// its statements: the store embeds it.
type Batches struct {
	s  Store
	st BatchStmts
}

// NewBatches is the batches of s, with its statements st.
func NewBatches(s Store, st BatchStmts) Batches { return Batches{s: s, st: st} }

// SuspendedBatches is backends.Batches.SuspendedBatches.
func (b Batches) SuspendedBatches(ctx context.Context) ([]string, error) {
	return QueryAll(ctx, b.s.DB, b.s.ScanID, Stmt{Query: "SELECT code FROM email_batches ORDER BY code"})
}

// SuspendBatch is backends.Batches.SuspendBatch: it records the batch and
// holds its messages, in one transaction, so that claims skip them by
// index (claim_held).
func (b Batches) SuspendBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	return b.s.InTx(ctx, func(tx Tx) error {
		_, err := b.suspend(ctx, tx, code)
		return err
	})
}

// suspend suspends the batch in tx, unless it is, and reports whether it
// did: the insert of the batch's row decides, so that of two transactions
// suspending it at once one does.
func (b Batches) suspend(ctx context.Context, tx Tx, code string) (bool, error) {
	if err := exec(ctx, tx, b.st.Lock(code)...); err != nil {
		return false, err
	}
	ins := b.st.Suspend(code, b.s.Time(time.Now()))
	n, err := tx.Exec(ctx, ins.Query, ins.Args...)
	if err != nil || n == 0 {
		return false, err
	}
	return true, exec(ctx, tx, b.st.Hold(code, true))
}

// ActivateBatch is backends.Batches.ActivateBatch: in one transaction, it
// removes the batch's row, releases its messages and restarts its tally
// (backends.BatchTally.Restart).
func (b Batches) ActivateBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	return b.s.InTx(ctx, func(tx Tx) error {
		if err := exec(ctx, tx, b.st.Lock(code)...); err != nil {
			return err
		}
		m := b.st.Mark(1)
		return exec(ctx, tx,
			Stmt{Query: "DELETE FROM email_batches WHERE code = " + m, Args: []any{code}},
			b.st.Hold(code, false),
			Stmt{Query: "UPDATE batch_tallies SET sent = 0, hard = 0, complaints = 0, tripped = NULL, tripped_at = NULL WHERE code = " + m,
				Args: []any{code}})
	})
}

// TallyBatches is backends.BatchTallies.TallyBatches: one statement, in a
// transaction run again after a deadlock. A relay tallies the batches of
// a few seconds: the statement stays small.
func (b Batches) TallyBatches(ctx context.Context, tallies map[string]backends.BatchTally) error {
	codes := slices.Sorted(maps.Keys(tallies))
	if len(codes) == 0 {
		return nil
	}
	adds := make([]backends.BatchTally, len(codes))
	for i, code := range codes {
		if err := backends.CheckBatch(code); err != nil {
			return err
		}
		adds[i] = tallies[code]
	}
	return b.s.InTx(ctx, func(tx Tx) error { return exec(ctx, tx, b.st.Tally(codes, adds)) })
}

// BatchTallies is backends.BatchTallies.BatchTallies: one statement by the
// primary key.
func (b Batches) BatchTallies(ctx context.Context, codes []string) (map[string]backends.BatchTally, error) {
	out := map[string]backends.BatchTally{}
	if len(codes) == 0 {
		return out, nil
	}
	marks := make([]string, len(codes))
	args := make([]any, len(codes))
	for i, c := range codes {
		marks[i], args[i] = b.st.Mark(i+1), c
	}
	type row struct {
		code  string
		tally backends.BatchTally
	}
	rows, err := QueryAll(ctx, b.s.DB, func(r Scanner) (row, error) {
		var (
			t       row
			tripped *string
			at      *time.Time
		)
		err := r.Scan(&t.code, &t.tally.Messages, &t.tally.Sent, &t.tally.Hard, &t.tally.Complaints, &tripped, &at)
		t.tally.Tripped = str(tripped)
		if at != nil {
			t.tally.TrippedAt = *at
		}
		return t, err
	}, Stmt{Query: "SELECT " + TallyCols + " FROM batch_tallies WHERE code IN (" + strings.Join(marks, ", ") + ")", Args: args})
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		out[r.code] = r.tally
	}
	return out, nil
}

// TripBatch is backends.BatchTallies.TripBatch: in one transaction, it
// suspends the batch as SuspendBatch does and records the trip in its
// tally, unless the batch's row was there: of relays tripping the batch at
// once, the one whose insert made the row reports true.
func (b Batches) TripBatch(ctx context.Context, code, reason string, at time.Time) (bool, error) {
	if err := backends.CheckBatch(code); err != nil {
		return false, err
	}
	var tripped bool
	err := b.s.InTx(ctx, func(tx Tx) error {
		var err error
		if tripped, err = b.suspend(ctx, tx, code); err != nil || !tripped {
			return err
		}
		return exec(ctx, tx, b.st.Trip(code, fitText(reason, maxTripped), b.s.Time(at)))
	})
	if err != nil {
		return false, err
	}
	return tripped, nil
}

// ListBatches is backends.BatchTallies.ListBatches: a range of the primary
// key, read one past the page, which tells that another follows.
func (b Batches) ListBatches(ctx context.Context, after string, limit int) ([]string, string, error) {
	if limit <= 0 {
		limit = backends.DefaultPageSize
	}
	page, err := QueryAll(ctx, b.s.DB, b.s.ScanID, listBatchesStmt(b.st, after, limit+1))
	if err != nil || len(page) <= limit {
		return page, "", err
	}
	page = page[:limit]
	return page, page[len(page)-1], nil
}

// listBatchesStmt reads up to limit codes of tallies after the code after,
// in code order (the primary key).
func listBatchesStmt(st BatchStmts, after string, limit int) Stmt {
	return Stmt{Query: "SELECT code FROM batch_tallies WHERE code > " + st.Mark(1) + " ORDER BY code LIMIT " + st.Mark(2),
		Args: []any{after, limit}}
}

// BatchCounts is backends.BatchTallies.BatchCounts.
func (b Batches) BatchCounts(ctx context.Context, code string) (map[backends.Status]int, error) {
	return counts(ctx, b.s.DB, b.st.Counts(code))
}
