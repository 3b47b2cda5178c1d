package submissions

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strings"

	// The drivers of the two dialects, registered as "pgx" and "mysql".
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
)

// DefaultTable is the table an app writes its submissions to.
const DefaultTable = "postino_submissions"

// dialect is the SQL of one database, side by side with the other's: the
// table, the claim and the delete. Everything else is database/sql.
type dialect struct {
	// driver is database/sql's name for it.
	driver string
	schema func(table string) []string
	// claim selects up to $1 rows, locking them and skipping those
	// locked, with the columns row.scan reads: rcpt_to as a JSON array,
	// send_after as Unix seconds. With lock, it selects their ids only,
	// and lock selects those rows by id, locking them.
	claim func(table string) string
	lock  func(table string, ids []string) (string, []any)
	// remove deletes the rows of ids.
	remove func(table string, ids []string) (string, []any)
}

var dialects = map[string]dialect{
	"postgres": {
		driver: "pgx",
		schema: func(t string) []string {
			return []string{
				`CREATE TABLE IF NOT EXISTS ` + t + ` (
    id          varchar(36) PRIMARY KEY,
    mail_from   text NOT NULL DEFAULT '',
    rcpt_to     text[] NOT NULL,
    message     bytea,
    subject     text,
    text_body   text,
    html_body   text,
    headers     jsonb,
    attachments jsonb,
    priority    smallint NOT NULL DEFAULT 2 CHECK (priority BETWEEN 0 AND 3),
    batch_code  varchar(64),
    send_after  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now()
)`,
				`CREATE INDEX IF NOT EXISTS ` + t + `_order ON ` + t + ` (priority, created_at)`,
				`CREATE OR REPLACE FUNCTION ` + t + `_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('` + t + `', '');
    RETURN NULL;
END
$$`,
				`CREATE OR REPLACE TRIGGER ` + t + `_notify AFTER INSERT ON ` + t + `
    FOR EACH STATEMENT EXECUTE FUNCTION ` + t + `_notify()`,
			}
		},
		claim: func(t string) string {
			return `SELECT id, mail_from, to_json(rcpt_to)::text, message, priority, batch_code,
    floor(extract(epoch FROM send_after))::bigint, subject, text_body, html_body, headers::text, attachments::text
FROM ` + t + ` ORDER BY priority, created_at LIMIT $1 FOR UPDATE SKIP LOCKED`
		},
		remove: func(t string, ids []string) (string, []any) {
			return `DELETE FROM ` + t + ` WHERE id = ANY($1)`, []any{ids}
		},
	},
	"mysql": {
		driver: "mysql",
		schema: func(t string) []string {
			return []string{`CREATE TABLE IF NOT EXISTS ` + t + ` (
    id          VARCHAR(36) NOT NULL PRIMARY KEY,
    mail_from   VARCHAR(320) NOT NULL DEFAULT '',
    rcpt_to     JSON NOT NULL,
    message     LONGBLOB NULL,
    subject     TEXT NULL,
    text_body   MEDIUMTEXT NULL,
    html_body   MEDIUMTEXT NULL,
    headers     JSON NULL,
    attachments JSON NULL,
    priority    TINYINT NOT NULL DEFAULT 2 CHECK (priority BETWEEN 0 AND 3),
    batch_code  VARCHAR(64) NULL,
    send_after  DATETIME(6) NULL COMMENT 'UTC',
    created_at  DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),
    KEY ` + t + `_order (priority, created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`}
		},
		// One statement taking a batch with SKIP LOCKED through the
		// (priority, created_at) index and the rows' other columns was
		// seen, on MariaDB 10.11, to give one submission to two relays
		// (TestConcurrentApps). Picking the ids on the index alone, then
		// locking those rows by their key (which waits for a holder, and
		// does not find a row it deleted), gives each row to one
		// transaction.
		claim: func(t string) string {
			return `SELECT id FROM ` + t + ` ORDER BY priority, created_at LIMIT ? FOR UPDATE SKIP LOCKED`
		},
		lock: func(t string, ids []string) (string, []any) {
			return `SELECT id, mail_from, rcpt_to, message, priority, batch_code,
    TIMESTAMPDIFF(SECOND, '1970-01-01 00:00:00', send_after), subject, text_body, html_body, headers, attachments
FROM ` + t + ` WHERE id IN (` + placeholders(len(ids)) + `) FOR UPDATE`, anys(ids)
		},
		remove: func(t string, ids []string) (string, []any) {
			return `DELETE FROM ` + t + ` WHERE id IN (` + placeholders(len(ids)) + `)`, anys(ids)
		},
	},
}

// placeholders is n of MySQL's.
func placeholders(n int) string { return "?" + strings.Repeat(",?", n-1) }

func anys(ids []string) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// Drivers are the databases a submissions table may live in.
func Drivers() []string { return []string{"postgres", "mysql"} }

var tableName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,55}$`)

// lookup returns the dialect of driver, and checks the table's name.
func lookup(driver, table string) (dialect, error) {
	d, ok := dialects[driver]
	if !ok {
		return d, fmt.Errorf("submissions driver %q: use postgres or mysql", driver)
	}
	if !tableName.MatchString(table) {
		return d, fmt.Errorf("submissions table %q: give a lower-case SQL name (letters, digits, _), up to 56 characters", table)
	}
	return d, nil
}

// Schema returns the DDL of a submissions table on driver: the statements,
// each ending with a semicolon. Every statement may run again.
func Schema(driver, table string) (string, error) {
	d, err := lookup(driver, table)
	if err != nil {
		return "", err
	}
	return strings.Join(d.schema(table), ";\n\n") + ";\n", nil
}

// Migrate creates the submissions table in the database of dsn, or brings
// it to the schema; running it again changes nothing.
func Migrate(ctx context.Context, driver, dsn, table string) error {
	d, err := lookup(driver, table)
	if err != nil {
		return err
	}
	db, err := sql.Open(d.driver, dsn)
	if err != nil {
		return fmt.Errorf("submissions: open the %s database: %w", driver, err)
	}
	defer db.Close()
	for _, stmt := range d.schema(table) {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("submissions: create table %s: %w", table, err)
		}
	}
	return nil
}
