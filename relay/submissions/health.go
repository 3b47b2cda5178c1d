package submissions

import (
	"errors"
	"fmt"
	"net"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// cause is what keeps a reader from its table, as far as an operator can
// act on it; "" is a failure of another kind.
type cause string

const (
	causeUnreachable cause = "unreachable"
	causeAccess      cause = "access"
	causeDatabase    cause = "database"
	causeTable       cause = "table"
	causeOther       cause = "other"
)

// failure is why a batch could not be taken, with what the operator can
// do about it.
type failure struct {
	cause  cause
	err    error
	advice string
}

func (f *failure) Error() string {
	if f.advice == "" {
		return f.err.Error()
	}
	return f.err.Error() + "; " + f.advice
}

func (f *failure) Unwrap() error { return f.err }

// diagnose says what err, met taking a batch, means for the reader's
// table. Each driver's errors are told by their codes: MySQL's numbers and
// PostgreSQL's SQLSTATE.
func (r *Reader) diagnose(err error) *failure {
	c := causeOf(err)
	migrate := fmt.Sprintf("postino submissions migrate --driver %s --table %s --dsn '<its DSN>'", r.cfg.Driver, r.cfg.Table)
	advice := map[cause]string{
		causeUnreachable: "the database server does not answer: start it, or correct the host and port of the DSN",
		causeAccess:      "the database refused the DSN's user, its password, or its rights on the table: correct the DSN, or grant the user SELECT and DELETE on the table",
		causeDatabase:    "the DSN's database does not exist: create it (or correct its name in the DSN), then run " + migrate,
		causeTable:       "the table " + r.cfg.Table + " does not exist: run " + migrate + " against the app's database",
	}[c]
	return &failure{cause: c, err: err, advice: advice}
}

// causeOf is the cause of err.
func causeOf(err error) cause {
	if my, ok := errors.AsType[*mysql.MySQLError](err); ok {
		switch my.Number {
		case 1044, 1045, 1142: // access denied: to the database, for the user, to a command
			return causeAccess
		case 1049: // unknown database
			return causeDatabase
		case 1146: // no such table
			return causeTable
		}
		return causeOther
	}
	if pg, ok := errors.AsType[*pgconn.PgError](err); ok {
		switch pg.Code {
		case "28000", "28P01", "42501": // invalid authorization, invalid password, insufficient privilege
			return causeAccess
		case "3D000": // invalid catalog name: no such database
			return causeDatabase
		case "42P01": // undefined table
			return causeTable
		}
		return causeOther
	}
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return causeUnreachable
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return causeUnreachable
	}
	return causeOther
}
