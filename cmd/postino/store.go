package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/dynamodb"
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
	switch {
	case *backend != "":
		cfg.Outbox.Backend = *backend
	case *dsn != "":
		cfg.Outbox.Backend = relay.DSNStore(*dsn)
	default:
		cfg.Outbox.Backend = cfg.MigrationStore()
	}
	if *dsn != "" {
		cfg.SetDSN(*dsn)
	}
	a, err := cfg.MigrateOutbox(ctx, func(applied []int, version int) { printMigrated(stdout, applied, version) })
	if errors.Is(err, relay.ErrNoMigration) {
		fmt.Fprintln(stdout, err)
		return nil
	}
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
