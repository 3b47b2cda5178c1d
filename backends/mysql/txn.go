package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"

	"github.com/genropy/postino/backends"
)

// txn is a transaction on a connection held by hand. A sql.Tx spends a
// round trip on its START TRANSACTION and another on its COMMIT; here the
// first goes with the transaction's first statement and the second with
// its last writes (Last), in one query each (the connection allows several
// statements a query: Connect). A group commit makes a few round trips, and
// those two were a third of them, paid again for each relay sharing the
// database.
type txn struct {
	ctx      context.Context
	conn     *sql.Conn
	begun    bool       // START TRANSACTION has been sent
	deferred []deferred // statements that go with the next query
	last     []stmt     // the writes that go with the COMMIT
	ended    bool
}

// deferred is a statement that waits for the transaction's next query,
// and what reads its rows there (nil for a statement that returns none).
type deferred struct {
	st   stmt
	read func(*sql.Rows) error
}

// begin takes a connection for a transaction, which starts with its first
// statement.
func begin(ctx context.Context, db *sql.DB) (*txn, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &txn{ctx: ctx, conn: conn}, nil
}

// start puts START TRANSACTION before the transaction's first statement.
// The driver passes over its empty result, so a query's rows are its
// statement's.
func (t *txn) start(query string) string {
	if t.begun {
		return query
	}
	t.begun = true
	return "START TRANSACTION;\n" + query
}

func (t *txn) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if err := t.Flush(ctx); err != nil {
		return nil, err
	}
	return t.conn.ExecContext(ctx, t.start(query), args...)
}

// QueryContext runs query after the deferred statements, in one round
// trip, and hands each of their results to its reader first: the rows it
// returns are query's.
func (t *txn) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	pending := t.deferred
	t.deferred = nil
	stmts := make([]stmt, 0, len(pending)+1)
	for _, d := range pending {
		stmts = append(stmts, d.st)
	}
	all := joinStmts(append(stmts, stmt{Query: query, Args: args}))
	rows, err := t.conn.QueryContext(ctx, t.start(all.Query), all.Args...)
	if err != nil {
		return nil, err
	}
	for _, d := range pending {
		if d.read == nil {
			continue // its result has no rows, which the driver passes over
		}
		if err = d.read(rows); err == nil && !rows.NextResultSet() {
			err = cmp.Or(rows.Err(), errors.New("mysql: a statement's result is missing"))
		}
		if err != nil {
			rows.Close()
			return nil, err
		}
	}
	return rows, nil
}

// Defer has st run at the start of the transaction's next query, in the
// same round trip; read, unless nil, reads its rows there (the rows of
// st's result, and no further). An Exec or Commit runs what is deferred
// first, in a round trip of its own (Flush).
func (t *txn) Defer(st stmt, read func(*sql.Rows) error) {
	t.deferred = append(t.deferred, deferred{st, read})
}

// Flush runs the deferred statements now.
func (t *txn) Flush(ctx context.Context) error {
	if len(t.deferred) == 0 {
		return nil
	}
	rows, err := t.QueryContext(ctx, "SELECT 1")
	if err != nil {
		return err
	}
	return rows.Close()
}

// Last has stmts run with the COMMIT, after those Last was given before:
// they must be the transaction's last statements, and their errors are
// Commit's.
func (t *txn) Last(stmts ...stmt) {
	t.last = append(t.last, stmts...)
}

// Commit runs the last writes and the COMMIT in one query and gives the
// connection back. The server stops at the first statement that fails, so
// a statement it refuses means nothing was committed; any other error (the
// connection lost or killed before the reply) leaves the outcome unknown,
// and the connection is closed.
func (t *txn) Commit() error {
	if err := t.Flush(t.ctx); err != nil {
		return err
	}
	if !t.begun && len(t.last) == 0 {
		t.end(nil) // nothing ran
		return nil
	}
	err := execAll(t.ctx, t, append(t.last, stmt{Query: "COMMIT"}))
	t.last = nil
	var me *mysql.MySQLError
	switch {
	case err == nil:
		t.end(nil)
		return nil
	case retryable(err):
		return err // Rollback ends the transaction, which runs again.
	case errors.As(err, &me) && !interrupted(me):
		return err // refused: Rollback ends the transaction.
	}
	t.end(driver.ErrBadConn)
	return fmt.Errorf("%w: %w", backends.ErrOutcomeUnknown, err)
}

// interrupted reports whether me ends the session rather than refuses a
// statement (the server shutting down, the query or connection killed): it
// may answer the COMMIT itself, after the commit landed.
func interrupted(me *mysql.MySQLError) bool {
	switch me.Number {
	case 1053, 1317, 1927:
		return true
	}
	return false
}

// Rollback ends a transaction Commit did not, and gives the connection
// back; a connection whose ROLLBACK fails is closed, which rolls back too.
func (t *txn) Rollback() {
	if t.ended {
		return
	}
	var err error
	if t.begun {
		_, err = t.conn.ExecContext(context.WithoutCancel(t.ctx), "ROLLBACK")
	}
	if err != nil {
		err = driver.ErrBadConn
	}
	t.end(err)
}

// end gives the connection back to the pool, or closes it when bad is
// driver.ErrBadConn (database/sql then discards it).
func (t *txn) end(bad error) {
	t.ended = true
	if bad != nil {
		t.conn.Raw(func(any) error { return bad })
	}
	t.conn.Close()
}
