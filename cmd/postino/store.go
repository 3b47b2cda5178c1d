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
	"github.com/genropy/postino/relay"
)

// migrate brings a MySQL outbox's schema up to date; running it again
// changes nothing.
func migrate(ctx context.Context, inv *invocation) error {
	stdout := inv.stdout
	fs := inv.flags()
	configPath := configFlag(fs, " whose outbox.mysql names the database")
	backend := fs.String("backend", "mysql", "outbox `store`: mysql (bolt and dynamodb need no migration)")
	dsn := fs.String("dsn", "", "MySQL `DSN` (or outbox.mysql.dsn, dsn_file, dsn_env)")
	if _, err := inv.parseArgs(fs); err != nil {
		return err
	}
	switch *backend {
	case "mysql":
	case "bolt", "dynamodb":
		fmt.Fprintf(stdout, "the %s outbox needs no migration%s\n", *backend,
			map[string]string{"dynamodb": " (postino dynamodb create-table adds missing indexes)", "bolt": ""}[*backend])
		return nil
	default:
		return fmt.Errorf("%w: migrate --backend %q: use mysql (bolt and dynamodb need no migration)", errUsage, *backend)
	}
	cfg, err := relay.LoadConfig(*configPath, os.Environ())
	if err != nil {
		return err
	}
	if *dsn != "" {
		cfg.Outbox.MySQL = relay.MySQLConfig{DSN: *dsn, TLSCAFile: cfg.Outbox.MySQL.TLSCAFile}
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
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "schema already at version %d: nothing to do\n", v)
	} else {
		fmt.Fprintf(stdout, "applied migrations %v; schema at version %d\n", applied, v)
	}
	a, err := mysql.Adopt(ctx, db)
	if err != nil {
		return err
	}
	printAdoption(stdout, a)
	return nil
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
