package postgres

import (
	"strconv"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// suppressionStmts are PostgreSQL's statements of the suppression list:
// a column's values in an array, whatever the number of rows (unnest).
type suppressionStmts struct{}

var _ sqlstore.SuppressionStmts = suppressionStmts{}

func (suppressionStmts) Mark(n int) string { return "$" + strconv.Itoa(n) }

// suppressionRows is the INSERT of entries.
func suppressionRows(entries []backends.Suppression) stmt {
	n := len(entries)
	var (
		keys, scopes, addrs, reasons, msgIDs, codes, diags, reports, bys = make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		created, firsts, changed = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
		expires                  = make([]*time.Time, n)
		strikes                  = make([]int, n)
		active                   = make([]bool, n)
	)
	for i, e := range entries {
		keys[i], scopes[i], addrs[i], reasons[i], msgIDs[i] = e.Key, e.Scope, e.Address, string(e.Reason), e.MessageID
		codes[i], diags[i], reports[i], bys[i] = e.Code, e.Diagnostic, e.ReportID, e.ChangedBy
		created[i], firsts[i], changed[i], expires[i] = ts(e.Created), ts(e.FirstStrike), ts(e.Changed), nullTime(e.Expires)
		strikes[i], active[i] = e.Strikes, e.Active
	}
	return stmt{Query: "INSERT INTO suppressions (" + sqlstore.SuppressionCols + `)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[],
			$9::timestamptz[], $10::timestamptz[], $11::int[], $12::timestamptz[], $13::bool[], $14::text[], $15::timestamptz[])`,
		Args: []any{keys, scopes, addrs, reasons, msgIDs, codes, diags, reports, created, expires, strikes, firsts, active, bys, changed}}
}

func (suppressionStmts) Insert(e backends.Suppression) stmt {
	st := suppressionRows([]backends.Suppression{e})
	st.Query += " ON CONFLICT (addr_key, scope) DO NOTHING"
	return st
}

func (suppressionStmts) Put(entries []backends.Suppression) stmt {
	st := suppressionRows(entries)
	st.Query += " ON CONFLICT (addr_key, scope) DO UPDATE SET " + sqlstore.SetSuppressionCols(func(c string) string { return "EXCLUDED." + c })
	return st
}

func (suppressionStmts) Delete(entries []backends.Suppression) stmt {
	keys, scopes := make([]string, len(entries)), make([]string, len(entries))
	for i, e := range entries {
		keys[i], scopes[i] = e.Key, e.Scope
	}
	return stmt{Query: `DELETE FROM suppressions s USING unnest($1::text[], $2::text[]) AS d(k, sc)
		WHERE s.addr_key = d.k AND s.scope = d.sc`, Args: []any{keys, scopes}}
}

func (suppressionStmts) History(events []backends.SuppressionEvent) stmt {
	n := len(events)
	keys, scopes, actions, reasons, bys, notes, msgIDs := make([]string, n), make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n)
	at := make([]time.Time, n)
	for i, ev := range events {
		keys[i], scopes[i], at[i], actions[i], reasons[i] = ev.Key, ev.Scope, ts(ev.At), string(ev.Action), string(ev.Reason)
		bys[i], notes[i], msgIDs[i] = ev.By, ev.Note, ev.MessageID
	}
	return stmt{Query: "INSERT INTO suppression_history (" + sqlstore.SuppressionEventCols + `)
		SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])`,
		Args: []any{keys, scopes, at, actions, reasons, bys, notes, msgIDs}}
}

// Blocking probes the primary key for each key and the two scopes.
func (suppressionStmts) Blocking(stream string, keys []string, now time.Time) stmt {
	return stmt{Query: "SELECT " + sqlstore.SuppressionCols + ` FROM suppressions
		WHERE addr_key = ANY($1) AND scope IN ('*', $2) AND active AND (expires IS NULL OR expires > $3)`,
		Args: []any{keys, stream, ts(now)}}
}
