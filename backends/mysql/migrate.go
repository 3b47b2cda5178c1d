package mysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/genropy/postino/backends/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations are the schema's files, in order (sqlstore.ReadMigrations).
func migrations() ([]sqlstore.Migration, error) {
	return sqlstore.ReadMigrations(migrationFiles, "migrations")
}

// splitStatements cuts a file at lines that end with ';', dropping comments.
func splitStatements(sql string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(sql, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteString("\n")
		if strings.HasSuffix(t, ";") {
			out = append(out, strings.TrimSuffix(strings.TrimSpace(cur.String()), ";"))
			cur.Reset()
		}
	}
	return out
}

// LatestVersion is the schema version this binary needs.
func LatestVersion() int { return sqlstore.LatestMigration(migrationFiles, "migrations") }

// SchemaVersion is the version of the schema in the database; 0 when none
// was applied.
func SchemaVersion(ctx context.Context, db *sql.DB) (int, error) {
	return sqlstore.SchemaVersion(ctx, sqlDB{db}, fault)
}

// alreadyDone are errors of a statement whose work was done by an earlier,
// interrupted run: table, column or index already there, or already gone.
func alreadyDone(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case 1050, 1060, 1061, 1091: // table exists, duplicate column, duplicate key name, no such key to drop
		return true
	}
	return false
}

// Migrate applies the migrations the database lacks, under a named lock so
// that relays starting together do not run them twice. It returns the
// versions applied.
func Migrate(ctx context.Context, db *sql.DB) ([]int, error) {
	return migrateTo(ctx, db, LatestVersion())
}

// migrateTo applies the migrations the database lacks up to version last.
func migrateTo(ctx context.Context, db *sql.DB, last int) ([]int, error) {
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK('postino_migrate', 120)").Scan(&got); err != nil || got.Int64 != 1 {
		return nil, fmt.Errorf("another postino is migrating this database (could not take its lock): %v", err)
	}
	defer conn.ExecContext(context.WithoutCancel(ctx), "SELECT RELEASE_LOCK('postino_migrate')")
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INT PRIMARY KEY,
		name VARCHAR(200) NOT NULL,
		applied_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)
	) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4`); err != nil {
		return nil, err
	}
	return sqlstore.Migrate(ctx, migrator{db, conn}, ms, last)
}

// migrator applies migrations on conn, one statement at a time: MySQL's
// DDL commits as it goes, so a statement an interrupted run applied
// already is passed over (alreadyDone).
type migrator struct {
	db   *sql.DB
	conn *sql.Conn
}

func (m migrator) Version(ctx context.Context) (int, error) { return SchemaVersion(ctx, m.db) }

func (m migrator) Apply(ctx context.Context, mg sqlstore.Migration) error {
	for i, st := range splitStatements(mg.SQL) {
		if _, err := m.conn.ExecContext(ctx, st); err != nil && !alreadyDone(err) {
			return fmt.Errorf("migration %s, statement %d: %w", mg.Name, i+1, err)
		}
	}
	_, err := m.conn.ExecContext(ctx, "INSERT INTO schema_migrations (version, name) VALUES (?, ?)", mg.Version, mg.Name)
	return err
}
