package mysql

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/go-sql-driver/mysql"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one numbered file of statements.
type migration struct {
	version    int
	name       string
	statements []string
}

func migrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s is not named NNNN_name.sql", e.Name())
		}
		b, err := migrationFiles.ReadFile("migrations/" + e.Name())
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: e.Name(), statements: splitStatements(string(b))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
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
func LatestVersion() int {
	ms, err := migrations()
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// SchemaVersion is the version of the schema in the database; 0 when none
// was applied.
func SchemaVersion(ctx context.Context, db *sql.DB) (int, error) {
	var v sql.NullInt64
	err := db.QueryRowContext(ctx, "SELECT MAX(version) FROM schema_migrations").Scan(&v)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1146 { // no such table
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return int(v.Int64), nil
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
	current, err := SchemaVersion(ctx, db)
	if err != nil {
		return nil, err
	}
	var applied []int
	for _, m := range ms {
		if m.version <= current || m.version > last {
			continue
		}
		for i, st := range m.statements {
			if _, err := conn.ExecContext(ctx, st); err != nil && !alreadyDone(err) {
				return applied, fmt.Errorf("migration %s, statement %d: %w", m.name, i+1, err)
			}
		}
		if _, err := conn.ExecContext(ctx, "INSERT INTO schema_migrations (version, name) VALUES (?, ?)", m.version, m.name); err != nil {
			return applied, err
		}
		applied = append(applied, m.version)
	}
	return applied, nil
}
