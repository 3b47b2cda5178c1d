package mysql

import (
	"context"
	"strings"
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
	var set []string
	for _, c := range strings.Split(sqlstore.SuppressionCols, ",")[2:] {
		c = strings.TrimSpace(c)
		set = append(set, c+" = VALUES("+c+")")
	}
	st.Query += " ON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
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
func (suppressionStmts) Blocking(stream string, keys []string, now time.Time) stmt {
	return stmt{Query: "SELECT " + sqlstore.SuppressionCols + " FROM suppressions WHERE addr_key IN (" + inList(len(keys)) +
		") AND scope IN ('*', ?) AND active = TRUE AND (expires IS NULL OR expires > ?)",
		Args: append(anyOf(keys), stream, clamp(now))}
}

func (s *Store) Suppress(ctx context.Context, c backends.SuppressionChange) (backends.Suppression, error) {
	return s.sql.Suppress(ctx, suppressionStmts{}, c)
}

func (s *Store) Suppressed(ctx context.Context, stream string, addrs []string, now time.Time) ([]backends.Suppression, error) {
	return s.sql.Suppressed(ctx, suppressionStmts{}, stream, addrs, now)
}

func (s *Store) SuppressionsOf(ctx context.Context, addr string) ([]backends.Suppression, error) {
	return s.sql.SuppressionsOf(ctx, suppressionStmts{}, addr)
}

func (s *Store) Unsuppress(ctx context.Context, r backends.SuppressionRemoval) error {
	return s.sql.Unsuppress(ctx, suppressionStmts{}, r)
}

func (s *Store) SuppressionHistory(ctx context.Context, addr string) ([]backends.SuppressionEvent, error) {
	return s.sql.SuppressionHistory(ctx, suppressionStmts{}, addr)
}

func (s *Store) ListSuppressions(ctx context.Context, q backends.SuppressionQuery) ([]backends.Suppression, string, error) {
	return s.sql.ListSuppressions(ctx, suppressionStmts{}, q)
}

func (s *Store) SuppressionCounts(ctx context.Context) (map[backends.SuppressionReason]int, error) {
	return s.sql.SuppressionCounts(ctx, suppressionStmts{})
}

// ImportSuppressions keeps each statement within bodyBudget, a quarter of
// max_allowed_packet.
func (s *Store) ImportSuppressions(ctx context.Context, entries []backends.Suppression, by string) error {
	return s.sql.ImportSuppressions(ctx, suppressionStmts{}, entries, by, s.bodyBudget)
}

func (s *Store) PruneSuppressions(ctx context.Context, now time.Time, limit int) (int, error) {
	return s.sql.PruneSuppressions(ctx, suppressionStmts{}, now, limit)
}
