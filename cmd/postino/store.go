package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/dynamodb"
	"github.com/genropy/postino/backends/mysql"
	"github.com/genropy/postino/backends/postgres"
	"github.com/genropy/postino/relay"
)

// migrate brings a MySQL or PostgreSQL outbox's schema up to date; running
// it again changes nothing.
func migrate(ctx context.Context, inv *invocation) error {
	stdout := inv.stdout
	fs := inv.flags()
	configPath := configFlag(fs, " whose outbox.mysql or outbox.postgres names the database")
	backend := fs.String("backend", "", "outbox `store`: mysql (default) or postgres (bolt and dynamodb need no migration)")
	dsn := fs.String("dsn", "", "MySQL or PostgreSQL `DSN` (or outbox.mysql.dsn, outbox.postgres.dsn, dsn_file, dsn_env); "+
		"a postgres:// URL implies --backend postgres")
	if _, err := inv.parseArgs(fs); err != nil {
		return err
	}
	cfg, err := relay.LoadConfig(*configPath, os.Environ())
	if err != nil {
		return err
	}
	b := *backend
	if b == "" && *dsn != "" {
		b = dsnBackend(*dsn)
	}
	if b == "" && cfg.Outbox.Backend != "postgres" {
		b = "mysql"
	}
	if b != "" {
		cfg.Outbox.Backend = b
	}
	if *dsn != "" {
		setDSN(&cfg, *dsn)
	}
	switch cfg.Outbox.Backend {
	case "mysql", "postgres":
	case "bolt", "dynamodb":
		fmt.Fprintf(stdout, "the %s outbox needs no migration%s\n", cfg.Outbox.Backend,
			map[string]string{"dynamodb": " (postino dynamodb create-table adds missing indexes)", "bolt": ""}[cfg.Outbox.Backend])
		return nil
	default:
		return fmt.Errorf("%w: migrate --backend %q: use mysql or postgres (bolt and dynamodb need no migration)", errUsage, cfg.Outbox.Backend)
	}
	if cfg.Outbox.Backend == "postgres" {
		return migratePostgres(ctx, stdout, cfg)
	}
	if my := cfg.Outbox.MySQL; my.DSN == "" && my.DSNFile == "" && my.DSNEnv == "" {
		return fmt.Errorf("%w: migrate needs the MySQL DSN: give --dsn DSN, set POSTINO_OUTBOX_MYSQL_DSN, "+
			"or set outbox.mysql.dsn, dsn_file or dsn_env in the --config file", errUsage)
	}
	conn, err := cfg.MySQLDSN()
	if err != nil {
		return err
	}
	db, err := mysql.Connect(ctx, conn, mysql.Options{CAFile: cfg.Outbox.MySQL.TLSCAFile, MaxConns: 2})
	if err != nil {
		return err
	}
	defer db.Close()
	applied, err := mysql.Migrate(ctx, db)
	if err != nil {
		return err
	}
	v, err := mysql.SchemaVersion(ctx, db)
	if err != nil {
		return err
	}
	printMigrated(stdout, applied, v)
	a, err := mysql.Adopt(ctx, db)
	if err != nil {
		return err
	}
	printAdoption(stdout, a)
	return nil
}

// dsnBackend is the store a --dsn given without --backend names: postgres
// for a postgres:// URL, mysql otherwise.
func dsnBackend(dsn string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return "postgres"
	}
	return "mysql"
}

// setDSN puts the --dsn of serve or migrate where cfg's backend reads it.
func setDSN(cfg *relay.Config, dsn string) {
	if cfg.Outbox.Backend == "postgres" {
		cfg.Outbox.Postgres = relay.PostgresConfig{DSN: dsn, MaxConns: cfg.Outbox.Postgres.MaxConns}
		return
	}
	cfg.Outbox.MySQL = relay.MySQLConfig{DSN: dsn, TLSCAFile: cfg.Outbox.MySQL.TLSCAFile, MaxConns: cfg.Outbox.MySQL.MaxConns}
}

// migratePostgres brings a PostgreSQL outbox's schema up to date and takes
// over the rows of the seed layout, as migrate does on MySQL.
func migratePostgres(ctx context.Context, stdout io.Writer, cfg relay.Config) error {
	if pg := cfg.Outbox.Postgres; pg.DSN == "" && pg.DSNFile == "" && pg.DSNEnv == "" {
		return fmt.Errorf("%w: migrate needs the PostgreSQL DSN: give --dsn postgres://…, set POSTINO_OUTBOX_POSTGRES_DSN, "+
			"or set outbox.postgres.dsn, dsn_file or dsn_env in the --config file", errUsage)
	}
	conn, err := cfg.PostgresDSN()
	if err != nil {
		return err
	}
	pool, err := postgres.Connect(ctx, conn, postgres.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := postgres.Migrate(ctx, pool)
	if err != nil {
		return err
	}
	v, err := postgres.SchemaVersion(ctx, pool)
	if err != nil {
		return err
	}
	printMigrated(stdout, applied, v)
	a, err := postgres.Adopt(ctx, pool)
	if err != nil {
		return err
	}
	printAdoption(stdout, a)
	return nil
}

// printMigrated says what migrate did.
func printMigrated(w io.Writer, applied []int, version int) {
	if len(applied) == 0 {
		fmt.Fprintf(w, "schema already at version %d: nothing to do\n", version)
	} else {
		fmt.Fprintf(w, "applied migrations %v; schema at version %d\n", applied, version)
	}
}

// printAdoption says what migrate or dynamodb create-table found of the
// seed layout's messages and did with them.
func printAdoption(w io.Writer, a backends.Adoption) {
	if len(a.Found) == 0 {
		return
	}
	statuses := slices.Sorted(maps.Keys(a.Found))
	fmt.Fprintln(w, "messages of the seed layout (no envelope of their own), by status:")
	for _, st := range statuses {
		fmt.Fprintf(w, "  %-28s %d\n", st, a.Found[st])
	}
	fmt.Fprintf(w, "taken over: %d on their way, back in ACCEPTED: intake reads each envelope from its payload file or its headers\n", a.Queued)
	fmt.Fprintf(w, "told: %d outcomes no plugin was told of now have their event\n", a.Told)
	if a.Unsendable > 0 {
		fmt.Fprintf(w, "could not: %d name no message file (eml_file_path, EmlFilePath): INVALID, and the plugins told; the app must send them again "+
			"(postino queue list --status INVALID)\n", a.Unsendable)
	}
}

// dynamodbCmd manages the DynamoDB outbox table.
func dynamodbCreateTable(ctx context.Context, inv *invocation) error {
	stdout := inv.stdout
	fs := inv.flags()
	table := fs.String("table", "", "table `name` (EMAIL_OUTBOX_TABLE)")
	endpoint := fs.String("endpoint", "", "DynamoDB `URL` (AWS_ENDPOINT_URL), for DynamoDB Local")
	region := fs.String("region", "", "AWS `region` (AWS_REGION)")
	seed := fs.Bool("seed-index", false, "also make the seed's StatusIndex, for tools that know only the seed (it caps the table's writes near a thousand a second on AWS)")
	if _, err := inv.parseArgs(fs); err != nil {
		return err
	}
	name, indexes, err := dynamodb.CreateTable(ctx, dynamodb.Options{Table: *table, Endpoint: *endpoint, Region: *region, SeedIndex: *seed})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "table %s is ready: keys Id and Status, indexes %s, TTL on\n", name, strings.Join(indexes, ", "))
	if slices.Contains(indexes, "StatusIndex") && !*seed {
		fmt.Fprintf(stdout, "the seed's StatusIndex is kept for the seed's tools; the relay does not read it, and every message writes one key of it, "+
			"which caps the table's writes near a thousand a second on AWS: delete it once no tool of the seed reads the table "+
			"(aws dynamodb update-table --table-name %s --global-secondary-index-updates '[{\"Delete\":{\"IndexName\":\"StatusIndex\"}}]')\n", name)
	}
	a, err := dynamodb.Adopt(ctx, dynamodb.Options{Table: name, Endpoint: *endpoint, Region: *region})
	if err != nil {
		return err
	}
	printAdoption(stdout, a)
	return nil
}
