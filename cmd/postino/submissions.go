package main

import (
	"context"
	"fmt"

	"github.com/genropy/postino/relay/submissions"
)

// submissionsSchema prints the DDL of a submissions table.
func submissionsSchema(_ context.Context, inv *invocation) error {
	fs := inv.flags()
	table := fs.String("table", submissions.DefaultTable, "the table's `name`")
	args, err := inv.parseArgs(fs, "postgres|mysql")
	if err != nil {
		return err
	}
	ddl, err := submissions.Schema(args[0], *table)
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	fmt.Fprint(inv.stdout, ddl)
	return nil
}

// submissionsMigrate creates a submissions table; running it again changes
// nothing.
func submissionsMigrate(ctx context.Context, inv *invocation) error {
	fs := inv.flags()
	driver := fs.String("driver", "", "the app's database: postgres or mysql")
	dsn := fs.String("dsn", "", "the app database's `DSN`")
	table := fs.String("table", submissions.DefaultTable, "the table's `name`")
	if _, err := inv.parseArgs(fs); err != nil {
		return err
	}
	if err := required(fs, "driver", "dsn"); err != nil {
		return err
	}
	if _, err := submissions.Schema(*driver, *table); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if err := submissions.Migrate(ctx, *driver, *dsn, *table); err != nil {
		return err
	}
	fmt.Fprintf(inv.stdout, "submissions table %s is ready\n", *table)
	return nil
}
