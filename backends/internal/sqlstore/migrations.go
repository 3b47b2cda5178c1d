package sqlstore

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Migration is one numbered file of a SQL store's schema,
// NNNN_name.sql: the store applies those its database lacks, in order.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// ReadMigrations reads the migrations in dir of fsys, in version order.
func ReadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var out []Migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s is not named NNNN_name.sql", e.Name())
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: v, Name: e.Name(), SQL: string(b)})
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	return out, nil
}

// LatestMigration is the version of the last migration in dir of fsys:
// the schema a store's binary needs; 0 when there is none.
func LatestMigration(fsys fs.FS, dir string) int {
	ms, err := ReadMigrations(fsys, dir)
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].Version
}

// SchemaVersion is the version of the schema in db, the last migration
// applied; 0 when none was (no schema_migrations table).
func SchemaVersion(ctx context.Context, db DB, fault func(error) Fault) (int, error) {
	var v *int64
	err := queryRow(ctx, db, Stmt{Query: "SELECT MAX(version) FROM schema_migrations"}, &v)
	if fault(err) == NoTable {
		return 0, nil
	}
	if err != nil || v == nil {
		return 0, err
	}
	return int(*v), nil
}

// Migrator applies a store's migrations, on the one connection they run
// on, under the lock that keeps relays starting together from migrating
// at once.
type Migrator interface {
	// Version is the schema's version in the database (SchemaVersion).
	Version(ctx context.Context) (int, error)
	// Apply applies m and records it in schema_migrations.
	Apply(ctx context.Context, m Migration) error
}

// Migrate applies with m the migrations of ms the database lacks, up to
// version last, in order, and returns the versions applied.
func Migrate(ctx context.Context, m Migrator, ms []Migration, last int) ([]int, error) {
	current, err := m.Version(ctx)
	if err != nil {
		return nil, err
	}
	var applied []int
	for _, mg := range ms {
		if mg.Version <= current || mg.Version > last {
			continue
		}
		if err := m.Apply(ctx, mg); err != nil {
			return applied, err
		}
		applied = append(applied, mg.Version)
	}
	return applied, nil
}
