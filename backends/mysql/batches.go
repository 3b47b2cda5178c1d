package mysql

import (
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// batchStmts are MySQL's statements of batches (sqlstore.Batches).
type batchStmts struct{}

var _ sqlstore.BatchStmts = batchStmts{}

func (batchStmts) Mark(int) string { return "?" }

// Lock is nothing: a creation reads its batches' rows in share mode once
// its messages are inserted (holdSuspended), and the row locks order it
// against a suspension.
func (batchStmts) Lock(string) []stmt { return nil }

// Suspend sets the code to itself on a duplicate, which changes no row
// (INSERT IGNORE would also pass over other errors).
func (batchStmts) Suspend(code string, at time.Time) stmt {
	return stmt{Query: "INSERT INTO email_batches (code, suspended_at) VALUES (?, ?) ON DUPLICATE KEY UPDATE code = code", Args: []any{code, at}}
}

func (batchStmts) Hold(code string, held bool) stmt { return holdBatchStmt(code, held) }

// holdBatchStmt sets or clears held on the messages of a batch, read
// through idx_batch even when the batch is a good part of the outbox (the
// optimizer then scans the whole table).
func holdBatchStmt(code string, held bool) stmt {
	return stmt{Query: "UPDATE emails FORCE INDEX (idx_batch) SET held = ? WHERE batch_code = ? AND held <> ?", Args: []any{held, code, held}}
}

func (batchStmts) Tally(codes []string, tallies []backends.BatchTally) stmt {
	args := make([]any, 0, 5*len(codes))
	for i, c := range codes {
		t := tallies[i]
		args = append(args, c, t.Messages, t.Sent, t.Hard, t.Complaints)
	}
	return stmt{Query: "INSERT INTO batch_tallies (code, messages, sent, hard, complaints) VALUES " + rowsOf(5, len(codes)) +
		` ON DUPLICATE KEY UPDATE messages = messages + VALUES(messages), sent = sent + VALUES(sent), hard = hard + VALUES(hard),
		complaints = complaints + VALUES(complaints)`, Args: args}
}

func (batchStmts) Trip(code, reason string, at time.Time) stmt {
	return stmt{Query: `INSERT INTO batch_tallies (code, tripped, tripped_at) VALUES (?, ?, ?)
		ON DUPLICATE KEY UPDATE tripped = VALUES(tripped), tripped_at = VALUES(tripped_at)`, Args: []any{code, reason, at}}
}

func (batchStmts) Counts(code string) stmt { return batchCountsStmt(code) }

// batchCountsStmt counts the batch's messages of each status, through
// idx_batch; ORDER BY NULL spares the sort MariaDB gives a GROUP BY.
func batchCountsStmt(code string) stmt {
	return stmt{Query: "SELECT status, COUNT(*) FROM emails FORCE INDEX (idx_batch) WHERE batch_code = ? GROUP BY status ORDER BY NULL", Args: []any{code}}
}
