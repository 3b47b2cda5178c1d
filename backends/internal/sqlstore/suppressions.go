package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/genropy/postino/backends"
)

// SuppressionCols are the columns of an entry's row, in the order
// SuppressionStmts' reads and writes take them.
const SuppressionCols = `addr_key, scope, address, reason, message_id, code, diagnostic, report_id, created, expires,
	strikes, first_strike, active, changed_by, changed`

// SuppressionEventCols are the columns of a history row, in the order
// SuppressionStmts' reads and writes take them.
const SuppressionEventCols = "addr_key, scope, at, action, reason, changed_by, note, message_id"

// SuppressionStmts builds the statements of the suppression list
// (tables suppressions and suppression_history) that differ from a store
// to another, each with its arguments; entries are written as
// SuppressionCols, history rows as SuppressionEventCols. The others are
// written here, with the store's Mark.
type SuppressionStmts interface {
	// Insert makes e's row unless its key and scope have one already,
	// which it leaves as it is: it changes no row then.
	Insert(e backends.Suppression) Stmt
	// Put writes entries, each replacing the row of its key and scope;
	// no two share them.
	Put(entries []backends.Suppression) Stmt
	// Delete removes the rows of the entries' keys and scopes.
	Delete(entries []backends.Suppression) Stmt
	// History adds the events' rows.
	History(events []backends.SuppressionEvent) Stmt
	// Blocking reads, in one statement by the primary key, the entries of
	// keys that block stream at now: of scope backends.ScopeAll or
	// stream, active, not expired.
	Blocking(stream string, keys []string, now time.Time) Stmt
	// Mark is the placeholder of a statement's nth argument, from 1.
	Mark(n int) string
}

// SetSuppressionCols is the SET list of an upsert of entries: each
// column but the key and scope, to value(column), the new row's.
func SetSuppressionCols(value func(col string) string) string {
	var set []string
	for _, c := range strings.Split(SuppressionCols, ",")[2:] {
		c = strings.TrimSpace(c)
		set = append(set, c+" = "+value(c))
	}
	return strings.Join(set, ", ")
}

// lockSuppressionStmt reads the entry of key and scope, locking its row.
func lockSuppressionStmt(st SuppressionStmts, key, scope string) Stmt {
	return Stmt{Query: "SELECT " + SuppressionCols + " FROM suppressions WHERE addr_key = " + st.Mark(1) + " AND scope = " + st.Mark(2) + " FOR UPDATE",
		Args: []any{key, scope}}
}

// suppressionsOfStmt reads every entry of key, in scope order.
func suppressionsOfStmt(st SuppressionStmts, key string) Stmt {
	return Stmt{Query: "SELECT " + SuppressionCols + " FROM suppressions WHERE addr_key = " + st.Mark(1) + " ORDER BY scope", Args: []any{key}}
}

// suppressionHistoryStmt reads the history rows of key, oldest first
// (idx_suphist_key).
func suppressionHistoryStmt(st SuppressionStmts, key string) Stmt {
	return Stmt{Query: "SELECT " + SuppressionEventCols + " FROM suppression_history WHERE addr_key = " + st.Mark(1) + " ORDER BY id", Args: []any{key}}
}

// SuppressionCountsQuery counts the active entries of each reason, from
// idx_sup_reason alone.
const SuppressionCountsQuery = "SELECT reason, COUNT(*) FROM suppressions WHERE active = TRUE GROUP BY reason"

// SuppressionPageStmt reads up to limit active entries in key order (the
// key, then the scope) whose key starts with q.Prefix and, when q.Reason
// is set, of that reason (idx_sup_reason, else the primary key); after,
// when not nil, is the key and scope they come after. Its redundant
// bound on the key alone makes the page a range of the index.
func SuppressionPageStmt(st SuppressionStmts, q backends.SuppressionQuery, after *[2]string, limit int) Stmt {
	var (
		where = []string{"active = TRUE"}
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return st.Mark(len(args))
	}
	if q.Reason != "" {
		where = append(where, "reason = "+arg(q.Reason))
	}
	if q.Prefix != "" {
		where = append(where, "addr_key LIKE "+arg(likePrefix(q.Prefix)))
	}
	if after != nil {
		where = append(where, "addr_key >= "+arg(after[0]), "(addr_key > "+arg(after[0])+" OR scope > "+arg(after[1])+")")
	}
	return Stmt{Query: "SELECT " + SuppressionCols + " FROM suppressions WHERE " + strings.Join(where, " AND ") +
		" ORDER BY addr_key, scope LIMIT " + arg(limit), Args: args}
}

// expiredSuppressionsStmt reads and locks up to limit active entries that
// expired before now (idx_sup_expiry).
func expiredSuppressionsStmt(st SuppressionStmts, now time.Time, limit int) Stmt {
	return Stmt{Query: "SELECT " + SuppressionCols + " FROM suppressions WHERE active = TRUE AND expires < " + st.Mark(1) +
		" ORDER BY expires LIMIT " + st.Mark(2) + " FOR UPDATE", Args: []any{now, limit}}
}

// Bounds of the columns a value from outside goes in (a server's reply, a
// report, an operator's note): a longer value is cut, since the evidence
// is for reading and the row must be written.
const (
	maxSupText       = 998
	maxSupCode       = 64
	maxSupBy         = 255
	maxSupDiagnostic = 2000
)

// fitText makes s something a text column of n characters holds: valid
// UTF-8 without NUL (PostgreSQL refuses both), cut to n characters.
func fitText(s string, n int) string {
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for range n {
		_, size := utf8.DecodeRuneInString(s[i:])
		i += size
	}
	return s[:i]
}

// fitSuppression is e as its row holds it.
func fitSuppression(e backends.Suppression) backends.Suppression {
	e.Address = fitText(e.Address, maxSupText)
	e.MessageID = fitText(e.MessageID, maxSupText)
	e.Code = fitText(e.Code, maxSupCode)
	e.Diagnostic = fitText(e.Diagnostic, maxSupDiagnostic)
	e.ReportID = fitText(e.ReportID, maxSupText)
	e.ChangedBy = fitText(e.ChangedBy, maxSupBy)
	return e
}

// fitEvent is ev as its row holds it.
func fitEvent(ev backends.SuppressionEvent) backends.SuppressionEvent {
	ev.By = fitText(ev.By, maxSupBy)
	ev.Note = fitText(ev.Note, maxSupCode+1+maxSupDiagnostic)
	ev.MessageID = fitText(ev.MessageID, maxSupText)
	return ev
}

// scanSuppression reads a row of SuppressionCols.
func scanSuppression(r Scanner) (backends.Suppression, error) {
	var (
		e       backends.Suppression
		expires *time.Time
	)
	err := r.Scan(&e.Key, &e.Scope, &e.Address, &e.Reason, &e.MessageID, &e.Code, &e.Diagnostic, &e.ReportID, &e.Created, &expires,
		&e.Strikes, &e.FirstStrike, &e.Active, &e.ChangedBy, &e.Changed)
	if expires != nil {
		e.Expires = *expires
	}
	return e, err
}

// scanSuppressionEvent reads a row of SuppressionEventCols.
func scanSuppressionEvent(r Scanner) (backends.SuppressionEvent, error) {
	var ev backends.SuppressionEvent
	err := r.Scan(&ev.Key, &ev.Scope, &ev.At, &ev.Action, &ev.Reason, &ev.By, &ev.Note, &ev.MessageID)
	return ev, err
}

// likePrefix is a LIKE pattern of the strings that start with p.
func likePrefix(p string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(p) + "%"
}

// lockSuppression reads the entry of key and scope, locking its row; nil
// when there is none.
func lockSuppression(ctx context.Context, tx DB, st SuppressionStmts, key, scope string) (*backends.Suppression, error) {
	got, err := QueryAll(ctx, tx, scanSuppression, lockSuppressionStmt(st, key, scope))
	if err != nil || len(got) == 0 {
		return nil, err
	}
	return &got[0], nil
}

// exec runs the statements on db, in order.
func exec(ctx context.Context, db DB, stmts ...Stmt) error {
	for _, s := range stmts {
		if _, err := db.Exec(ctx, s.Query, s.Args...); err != nil {
			return err
		}
	}
	return nil
}

// Suppressions is backends.Suppressions in a SQL store, over its
// statements: the store embeds it.
type Suppressions struct {
	s  Store
	st SuppressionStmts
	// budget bounds the bytes of values of a statement of an import.
	budget int
}

// NewSuppressions is the suppression list of s, with its statements st
// and, for imports, statements of budget bytes of values at most.
func NewSuppressions(s Store, st SuppressionStmts, budget int) Suppressions {
	return Suppressions{s: s, st: st, budget: budget}
}

// Suppress is backends.Suppressions.Suppress: in a transaction, it locks the
// entry's row, applies c to it and writes it with its history row. A
// missing row is inserted unless another transaction inserted it
// meanwhile: the row is then read again, locked, so that both changes
// count.
func (l Suppressions) Suppress(ctx context.Context, c backends.SuppressionChange) (backends.Suppression, error) {
	if err := c.Check(); err != nil {
		return backends.Suppression{}, err
	}
	c.Entry = fitSuppression(c.Entry)
	c.By = fitText(c.By, maxSupBy)
	var out backends.Suppression
	err := l.s.InTx(ctx, func(tx Tx) error {
		// The second round meets the row the other transaction made.
		for range 2 {
			cur, err := lockSuppression(ctx, tx, l.st, c.Entry.Key, c.Entry.Scope)
			if err != nil {
				return err
			}
			next, changed := c.Apply(cur)
			out = next
			if !changed {
				return nil
			}
			if cur != nil {
				return exec(ctx, tx, l.st.Put([]backends.Suppression{next}), l.st.History([]backends.SuppressionEvent{fitEvent(c.EventOf(next))}))
			}
			ins := l.st.Insert(next)
			n, err := tx.Exec(ctx, ins.Query, ins.Args...)
			if err != nil {
				return err
			}
			if n > 0 {
				return exec(ctx, tx, l.st.History([]backends.SuppressionEvent{fitEvent(c.EventOf(next))}))
			}
		}
		return fmt.Errorf("suppress %s: its entry was made and removed while this change waited; try again", c.Entry.Address)
	})
	if err != nil {
		return backends.Suppression{}, err
	}
	return out, nil
}

// Suppressed is backends.Suppressions.Suppressed: one statement for every
// address.
func (l Suppressions) Suppressed(ctx context.Context, stream string, addrs []string, now time.Time) ([]backends.Suppression, error) {
	keys := backends.SuppressionKeys(addrs)
	if len(keys) == 0 {
		return nil, nil
	}
	return QueryAll(ctx, l.s.DB, scanSuppression, l.st.Blocking(stream, keys, now))
}

// SuppressionsOf is backends.Suppressions.SuppressionsOf.
func (l Suppressions) SuppressionsOf(ctx context.Context, addr string) ([]backends.Suppression, error) {
	key, err := backends.SuppressionKey(addr)
	if err != nil {
		return nil, err
	}
	return QueryAll(ctx, l.s.DB, scanSuppression, suppressionsOfStmt(l.st, key))
}

// SuppressionHistory is backends.Suppressions.SuppressionHistory.
func (l Suppressions) SuppressionHistory(ctx context.Context, addr string) ([]backends.SuppressionEvent, error) {
	key, err := backends.SuppressionKey(addr)
	if err != nil {
		return nil, err
	}
	return QueryAll(ctx, l.s.DB, scanSuppressionEvent, suppressionHistoryStmt(l.st, key))
}

// Unsuppress is backends.Suppressions.Unsuppress, in a transaction.
func (l Suppressions) Unsuppress(ctx context.Context, r backends.SuppressionRemoval) error {
	key, err := backends.SuppressionKey(r.Address)
	if err != nil {
		return err
	}
	return l.s.InTx(ctx, func(tx Tx) error {
		cur, err := lockSuppression(ctx, tx, l.st, key, r.Scope)
		if err != nil {
			return err
		}
		if cur == nil {
			return fmt.Errorf("%s has no suppression of scope %s: %w", r.Address, r.Scope, backends.ErrNotFound)
		}
		return exec(ctx, tx, l.st.Delete([]backends.Suppression{*cur}), l.st.History([]backends.SuppressionEvent{fitEvent(r.RemovalEvent(key, cur.Reason))}))
	})
}

// ListSuppressions is backends.Suppressions.ListSuppressions: it reads one entry
// past the page, which tells that another follows.
func (l Suppressions) ListSuppressions(ctx context.Context, q backends.SuppressionQuery) ([]backends.Suppression, string, error) {
	q.Limit = q.PageSize()
	var after *[2]string
	if q.After != "" {
		key, scope, err := backends.ParseSuppressionCursor(q.After)
		if err != nil {
			return nil, "", fmt.Errorf("suppression cursor %q was not given by this store: %w", q.After, err)
		}
		after = &[2]string{key, scope}
	}
	page, err := QueryAll(ctx, l.s.DB, scanSuppression, SuppressionPageStmt(l.st, q, after, q.Limit+1))
	if err != nil || len(page) <= q.Limit {
		return page, "", err
	}
	page = page[:q.Limit]
	return page, backends.SuppressionCursor(page[len(page)-1]), nil
}

// SuppressionCounts is backends.Suppressions.SuppressionCounts.
func (l Suppressions) SuppressionCounts(ctx context.Context) (map[backends.SuppressionReason]int, error) {
	type count struct {
		reason backends.SuppressionReason
		n      int
	}
	rows, err := QueryAll(ctx, l.s.DB, func(r Scanner) (count, error) {
		var c count
		err := r.Scan(&c.reason, &c.n)
		return c, err
	}, Stmt{Query: SuppressionCountsQuery})
	if err != nil {
		return nil, err
	}
	out := make(map[backends.SuppressionReason]int, len(rows))
	for _, c := range rows {
		out[c.reason] = c.n
	}
	return out, nil
}

// importRows bounds the rows of one statement of an import.
const importRows = 1000

// ImportSuppressions is backends.Suppressions.ImportSuppressions, in one
// transaction: statements of importRows rows at most and of budget bytes
// of values, about, so that each stays within what the server takes in
// one packet. Of the entries of one key and scope, the last is kept; each
// has its history row.
func (l Suppressions) ImportSuppressions(ctx context.Context, entries []backends.Suppression, by string) error {
	last := make(map[[2]string]int, len(entries))
	events := make([]backends.SuppressionEvent, len(entries))
	for i, e := range entries {
		if e.Key == "" {
			return errors.New("import: an entry was not prepared (backends.PrepareImport)")
		}
		last[[2]string{e.Key, e.Scope}] = i
		events[i] = fitEvent(backends.ImportEvent(e, by))
	}
	rows := make([]backends.Suppression, 0, len(last))
	for i, e := range entries {
		if last[[2]string{e.Key, e.Scope}] == i {
			rows = append(rows, fitSuppression(e))
		}
	}
	err := l.s.InTx(ctx, func(tx Tx) error {
		for _, c := range pieces(len(rows), l.budget, func(i int) int { return suppressionSize(rows[i]) }) {
			if err := exec(ctx, tx, l.st.Put(rows[c[0]:c[1]])); err != nil {
				return err
			}
		}
		for _, c := range pieces(len(events), l.budget, func(i int) int { return eventSize(events[i]) }) {
			if err := exec(ctx, tx, l.st.History(events[c[0]:c[1]])); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	return nil
}

// rowOverhead is what a row of a statement takes beyond its text
// values: its times and numbers, the separators.
const rowOverhead = 200

func suppressionSize(e backends.Suppression) int {
	return len(e.Key) + len(e.Scope) + len(e.Address) + len(e.Reason) + len(e.MessageID) + len(e.Code) + len(e.Diagnostic) +
		len(e.ReportID) + len(e.ChangedBy) + rowOverhead
}

func eventSize(ev backends.SuppressionEvent) int {
	return len(ev.Key) + len(ev.Scope) + len(ev.Action) + len(ev.Reason) + len(ev.By) + len(ev.Note) + len(ev.MessageID) + rowOverhead
}

// pieces cuts n rows in ranges [from, to) of importRows rows at most, and
// of budget bytes (size of each) unless one row alone is more.
func pieces(n, budget int, size func(i int) int) [][2]int {
	var out [][2]int
	from, bytes := 0, 0
	for i := range n {
		sz := size(i)
		if i > from && (i-from == importRows || bytes+sz > budget) {
			out = append(out, [2]int{from, i})
			from, bytes = i, 0
		}
		bytes += sz
	}
	if n > from {
		out = append(out, [2]int{from, n})
	}
	return out
}

// PruneSuppressions is backends.Suppressions.PruneSuppressions, in a transaction:
// each entry removed leaves a history row.
func (l Suppressions) PruneSuppressions(ctx context.Context, now time.Time, limit int) (int, error) {
	n := 0
	err := l.s.InTx(ctx, func(tx Tx) error {
		expired, err := QueryAll(ctx, tx, scanSuppression, expiredSuppressionsStmt(l.st, l.s.Time(now), limit))
		n = len(expired)
		if err != nil || n == 0 {
			return err
		}
		events := make([]backends.SuppressionEvent, n)
		for i, e := range expired {
			events[i] = backends.SuppressionEvent{Key: e.Key, Scope: e.Scope, At: now, Action: backends.ActionExpired, Reason: e.Reason, By: "retention"}
		}
		return exec(ctx, tx, l.st.Delete(expired), l.st.History(events))
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
