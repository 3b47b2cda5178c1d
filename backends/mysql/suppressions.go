package mysql

import (
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// suppressionStmts are MySQL's statements of the suppression list: rows
// of values, the arguments inside the statement's text (Connect).
type suppressionStmts struct{}

var _ sqlstore.SuppressionStmts = suppressionStmts{}

func (suppressionStmts) Mark(int) string { return "?" }

// suppressionRows is the INSERT of entries.
func suppressionRows(entries []backends.Suppression) stmt {
	args := make([]any, 0, 15*len(entries))
	for _, e := range entries {
		args = append(args, e.Key, e.Scope, e.Address, e.Reason, e.MessageID, e.Code, e.Diagnostic, e.ReportID, clamp(e.Created),
			nullTime(e.Expires), e.Strikes, clamp(e.FirstStrike), e.Active, e.ChangedBy, clamp(e.Changed))
	}
	return stmt{Query: "INSERT INTO suppressions (" + sqlstore.SuppressionCols + ") VALUES " + rowsOf(15, len(entries)), Args: args}
}

// Insert sets the key to itself on a duplicate, which changes no row
// (INSERT IGNORE would also pass over a value too long).
func (suppressionStmts) Insert(e backends.Suppression) stmt {
	st := suppressionRows([]backends.Suppression{e})
	st.Query += " ON DUPLICATE KEY UPDATE addr_key = addr_key"
	return st
}

func (suppressionStmts) Put(entries []backends.Suppression) stmt {
	st := suppressionRows(entries)
	st.Query += " ON DUPLICATE KEY UPDATE " + sqlstore.SetSuppressionCols(func(c string) string { return "VALUES(" + c + ")" })
	return st
}

func (suppressionStmts) Delete(entries []backends.Suppression) stmt {
	args := make([]any, 0, 2*len(entries))
	for _, e := range entries {
		args = append(args, e.Key, e.Scope)
	}
	return stmt{Query: "DELETE FROM suppressions WHERE (addr_key, scope) IN (" + rowsOf(2, len(entries)) + ")", Args: args}
}

func (suppressionStmts) History(events []backends.SuppressionEvent) stmt {
	args := make([]any, 0, 8*len(events))
	for _, ev := range events {
		args = append(args, ev.Key, ev.Scope, clamp(ev.At), ev.Action, ev.Reason, ev.By, ev.Note, ev.MessageID)
	}
	return stmt{Query: "INSERT INTO suppression_history (" + sqlstore.SuppressionEventCols + ") VALUES " + rowsOf(8, len(events)), Args: args}
}

// Blocking reads the primary key's ranges of the keys and the two scopes.
// USE INDEX spares the optimizer its dives into the two other indexes,
// whose ranges (every active entry) it would weigh on each lookup only to
// choose the primary key: a third of a lookup's time at a million entries.
func (suppressionStmts) Blocking(stream string, keys []string, now time.Time) stmt {
	return stmt{Query: "SELECT " + sqlstore.SuppressionCols + " FROM suppressions USE INDEX (PRIMARY) WHERE addr_key IN (" + inList(len(keys)) +
		") AND scope IN ('*', ?) AND active = TRUE AND (expires IS NULL OR expires > ?)",
		Args: append(anyOf(keys), stream, clamp(now))}
}
