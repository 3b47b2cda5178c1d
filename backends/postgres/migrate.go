package postgres

import (
	"context"
	"embed"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/genropy/postino/backends/internal/sqlstore"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrations are the schema's files, in order (sqlstore.ReadMigrations).
func migrations() ([]sqlstore.Migration, error) {
	return sqlstore.ReadMigrations(migrationFiles, "migrations")
}

// LatestVersion is the schema version this binary needs.
func LatestVersion() int { return sqlstore.LatestMigration(migrationFiles, "migrations") }

// SchemaVersion is the version of the schema in the database; 0 when none
// was applied.
func SchemaVersion(ctx context.Context, q querier) (int, error) {
	return sqlstore.SchemaVersion(ctx, pgDB{q}, fault)
}

// migrateLock is the advisory lock that keeps relays starting together
// from migrating at once.
const migrateLock = 0x706f7374696e6f // "postino"

// Migrate applies the migrations the database lacks, each in a transaction
// of its own with its row in schema_migrations (PostgreSQL's DDL is
// transactional: a migration is applied whole or not at all), under an
// advisory lock. It returns the versions applied.
func Migrate(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	return migrateTo(ctx, pool, LatestVersion())
}

// migrateTo applies the migrations the database lacks up to version last.
func migrateTo(ctx context.Context, pool *pgxpool.Pool, last int) ([]int, error) {
	ms, err := migrations()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrateLock)); err != nil {
		return nil, fmt.Errorf("another postino is migrating this database (could not take its lock): %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrateLock))
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INT PRIMARY KEY,
		name VARCHAR(200) NOT NULL,
		applied_at TIMESTAMPTZ NOT NULL DEFAULT now())`); err != nil {
		return nil, err
	}
	return sqlstore.Migrate(ctx, migrator{conn}, ms, last)
}

// migrator applies migrations on conn, each in a transaction of its own
// with its row in schema_migrations (PostgreSQL's DDL is transactional: a
// migration is applied whole or not at all).
type migrator struct{ conn *pgxpool.Conn }

func (m migrator) Version(ctx context.Context) (int, error) { return SchemaVersion(ctx, m.conn) }

func (m migrator) Apply(ctx context.Context, mg sqlstore.Migration) error {
	err := pgx.BeginFunc(ctx, m.conn, func(tx pgx.Tx) error {
		// The simple protocol runs a file of several statements.
		if err := tx.Conn().PgConn().Exec(ctx, mg.SQL).Close(); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", mg.Version, mg.Name)
		return err
	})
	if err != nil {
		return fmt.Errorf("migration %s: %w", mg.Name, err)
	}
	return nil
}
