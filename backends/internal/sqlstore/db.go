package sqlstore

import (
	"context"
	"errors"
)

// DB is a SQL store's database, or one of its transactions, as the shared
// code below runs statements on it: each store adapts its driver's
// (database/sql, pgx) and keeps its statements, which it hands over whole.
type DB interface {
	// Query runs query and returns its rows, which the caller closes.
	Query(ctx context.Context, query string, args ...any) (Result, error)
	// Exec runs a statement and returns the rows it changed.
	Exec(ctx context.Context, query string, args ...any) (int64, error)
}

// Result is the rows a query returns (database/sql's and pgx's alike).
type Result interface {
	Scanner
	Next() bool
	Err() error
	Close()
}

// Scanner reads a row's columns.
type Scanner interface {
	Scan(dest ...any) error
}

// Stmt is a statement with its arguments. A store builds its hot
// statements with functions named after them, which it runs and its
// TestPlans explains, so that the plans tested are those of the
// statements run.
type Stmt struct {
	Query string
	Args  []any
}

// QueryAll runs st on db and reads each row of its result with scan.
func QueryAll[T any](ctx context.Context, db DB, scan func(Scanner) (T, error), st Stmt) ([]T, error) {
	rows, err := db.Query(ctx, st.Query, st.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// Fault is what a database's error says where the shared code tells
// errors apart; each store reads its driver's codes into one.
type Fault int

const (
	// OtherFault is any error the others are not.
	OtherFault Fault = iota
	// KeyTaken: a unique key holds the value already.
	KeyTaken
	// NoParent: a foreign key names no row: the message is not there.
	NoParent
	// NoTable: the table is not there: no migration ran.
	NoTable
)

// errNoRow is a read that found no row.
var errNoRow = errors.New("no row")

// queryRow reads the one row st selects into dest; errNoRow when there is
// none.
func queryRow(ctx context.Context, db DB, st Stmt, dest ...any) error {
	rows, err := db.Query(ctx, st.Query, st.Args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return errNoRow
	}
	return rows.Scan(dest...)
}
