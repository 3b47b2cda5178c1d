package relay

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsdynamodb "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/bolt"
	"github.com/genropy/postino/backends/dynamodb"
	"github.com/genropy/postino/backends/mysql"
	"github.com/genropy/postino/backends/postgres"
)

// outboxStore is a store the outbox can be kept in (outbox.backend), with
// everything the relay, its commands and its tools do that depends on
// which: adding a store is adding its entry to stores.
type outboxStore struct {
	name string
	// local, when the relays of a fleet cannot share the store, says why:
	// it cannot keep the messages' bytes (spool.store outbox).
	local string
	// dsn holds the settings of a store that a DSN names; the functions
	// below get the DSN they give ("" for another store).
	dsn *dsnSettings
	// check reports what else is wrong with the store's settings (Check).
	check func(c *Config) error
	// defaults fills in the store's settings that zero leaves to the
	// relay (Effective); getenv gives the variables some come from.
	defaults func(c *Config, getenv func(string) string)
	// access reports what would stop the store from opening, short of
	// reaching it: the DSN's text, its CA file, a table with no name
	// (Validate).
	access func(c *Config, dsn string) error
	// open opens the store; exclusive is true when no other process can
	// use it (bbolt's file lock).
	open      func(ctx context.Context, c *Config, dsn string) (backends.Outbox, error)
	exclusive bool
	// migrate brings the store's schema up to date, tells migrated the
	// versions it applied and the schema's, and takes over the messages
	// an outbox of the seed layout left (postino migrate); nil for a
	// store that needs no migration, noMigration saying what stands for
	// it.
	migrate     func(ctx context.Context, c *Config, dsn string, migrated func(applied []int, version int)) (backends.Adoption, error)
	noMigration string
	// mask masks the secrets the store's settings hold (config print).
	mask func(o *OutboxConfig)
	// create makes a new, empty outbox of that name where the store's
	// settings name its server (a database on it, a table), and points
	// them at it, or returns the DSN that names it; drop removes it. Nil
	// when opening makes the outbox.
	create func(ctx context.Context, c *Config, dsn, name string) (newDSN string, drop func() error, err error)
}

// dsnSettings are the settings of a store that a DSN names.
type dsnSettings struct {
	// key is the store's section (outbox.mysql); kind names the store in
	// what migrate says (MySQL), form the DSN's form in it.
	key, kind, form string
	// schemes are the URL schemes of the store's DSNs: a DSN given without
	// a store names the store of its scheme, or, with none, the store
	// that has none.
	schemes []string
	// of is the DSN's settings among c's: the DSN, or where its secret
	// is.
	of func(c *Config) (dsn, file, env *string)
}

// get reads the DSN of d in c.
func (d *dsnSettings) get(c *Config, getenv func(string) string) (string, error) {
	dsn, file, env := d.of(c)
	return dsnOf(d.key, *dsn, *file, *env, getenv)
}

// set sets the DSN of d in c, in place of its file or variable.
func (d *dsnSettings) set(c *Config, v string) {
	dsn, file, env := d.of(c)
	*dsn, *file, *env = v, "", ""
}

// check reports d's settings that do not give one DSN.
func (d *dsnSettings) check(c *Config) error {
	dsn, file, env := d.of(c)
	return checkDSN(d.key, " (--dsn)", *dsn, *file, *env)
}

// stores are the outbox stores, in the order the messages list them.
var stores = []outboxStore{
	{
		name: "bolt", local: "bbolt is this relay's own file",
		defaults: func(c *Config, _ func(string) string) { c.Outbox.Bolt.Path = c.boltPath() },
		open: func(_ context.Context, c *Config, _ string) (backends.Outbox, error) {
			return bolt.Open(c.boltPath(), bolt.Options{})
		},
		exclusive: true,
	},
	{
		name: "mysql",
		dsn: &dsnSettings{key: "outbox.mysql", kind: "MySQL", form: "DSN", of: func(c *Config) (_, _, _ *string) {
			return &c.Outbox.MySQL.DSN, &c.Outbox.MySQL.DSNFile, &c.Outbox.MySQL.DSNEnv
		}},
		defaults: func(c *Config, _ func(string) string) {
			if c.Outbox.MySQL.MaxConns <= 0 {
				c.Outbox.MySQL.MaxConns = mysql.DefaultMaxConns
			}
		},
		access: func(c *Config, dsn string) error { return mysql.CheckDSN(dsn, c.mysqlOptions(0)) },
		open: func(ctx context.Context, c *Config, dsn string) (backends.Outbox, error) {
			return mysql.Open(ctx, dsn, c.mysqlOptions(0))
		},
		migrate: migrateMySQL,
		mask: func(o *OutboxConfig) {
			if o.MySQL.DSN != "" {
				o.MySQL.DSN = maskMySQLDSN(o.MySQL.DSN)
			}
		},
		create: createMySQL,
	},
	{
		name: "postgres",
		dsn: &dsnSettings{key: "outbox.postgres", kind: "PostgreSQL", form: "postgres://…", schemes: []string{"postgres", "postgresql"},
			of: func(c *Config) (_, _, _ *string) {
				return &c.Outbox.Postgres.DSN, &c.Outbox.Postgres.DSNFile, &c.Outbox.Postgres.DSNEnv
			}},
		defaults: func(c *Config, _ func(string) string) {
			if c.Outbox.Postgres.MaxConns <= 0 {
				c.Outbox.Postgres.MaxConns = postgres.DefaultMaxConns
			}
		},
		access: func(_ *Config, dsn string) error { return postgres.CheckDSN(dsn) },
		open: func(ctx context.Context, c *Config, dsn string) (backends.Outbox, error) {
			return postgres.Open(ctx, dsn, postgres.Options{MaxConns: c.Outbox.Postgres.MaxConns})
		},
		migrate: migratePostgres,
		mask: func(o *OutboxConfig) {
			o.Postgres.DSN = pgPassword.ReplaceAllString(maskURL(o.Postgres.DSN), "${1}"+masked)
		},
		create: createPostgres,
	},
	{
		name:  "dynamodb",
		check: checkTTL,
		defaults: func(c *Config, getenv func(string) string) {
			if c.Outbox.DynamoDB.Table == "" {
				c.Outbox.DynamoDB.Table = getenv("EMAIL_OUTBOX_TABLE")
			}
			if c.Outbox.DynamoDB.Endpoint == "" {
				c.Outbox.DynamoDB.Endpoint = getenv("AWS_ENDPOINT_URL")
			}
		},
		access: func(c *Config, _ string) error {
			if c.Outbox.DynamoDB.Table == "" {
				return errors.New("outbox.dynamodb.table is empty: set it (POSTINO_OUTBOX_DYNAMODB_TABLE, --table), or EMAIL_OUTBOX_TABLE")
			}
			return nil
		},
		open: func(ctx context.Context, c *Config, _ string) (backends.Outbox, error) {
			return dynamodb.Open(ctx, c.dynamoDBOptions())
		},
		noMigration: " (postino dynamodb create-table adds missing indexes)",
		create:      createDynamoDB,
	},
}

// storeNamed is the store of outbox.backend name; ok is false for none.
func storeNamed(name string) (outboxStore, bool) {
	for _, s := range stores {
		if s.name == name {
			return s, true
		}
	}
	return outboxStore{}, false
}

// store is the configured store; an error for a name no store has.
func (c *Config) store() (outboxStore, error) {
	s, ok := storeNamed(c.Outbox.Backend)
	if !ok {
		return s, fmt.Errorf("outbox.backend %q: use %s", c.Outbox.Backend, storeNames(func(outboxStore) bool { return true }, "or"))
	}
	return s, nil
}

// dsn reads the DSN of the configured store; "" for a store that no DSN
// names.
func (c *Config) dsn(s outboxStore, getenv func(string) string) (string, error) {
	if s.dsn == nil {
		return "", nil
	}
	return s.dsn.get(c, getenv)
}

// storeNames lists the names of the stores keep selects: "a, b or c".
func storeNames(keep func(outboxStore) bool, or string) string {
	var names []string
	for _, s := range stores {
		if keep(s) {
			names = append(names, s.name)
		}
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " " + or + " " + names[len(names)-1]
}

// checkOutbox checks the outbox's store and its settings.
func (c *Config) checkOutbox() error {
	s, err := c.store()
	switch {
	case err != nil:
		return err
	case s.dsn != nil:
		return s.dsn.check(c)
	case s.check != nil:
		return s.check(c)
	}
	return nil
}

// checkOutboxAccess reports what would stop the outbox from opening
// before it is reached: its DSN's secret and text, its CA file, a DynamoDB
// table with no name.
func (c *Config) checkOutboxAccess(getenv func(string) string) error {
	s, err := c.store()
	if err != nil {
		return err
	}
	dsn, err := c.dsn(s, getenv)
	if err != nil || s.access == nil {
		return err
	}
	return s.access(c, dsn)
}

// OpenOutbox opens the configured outbox store, as serve does.
func (c *Config) OpenOutbox(ctx context.Context) (backends.Outbox, error) {
	s, err := c.store()
	if err != nil {
		return nil, err
	}
	dsn, err := c.dsn(s, os.Getenv)
	if err != nil {
		return nil, err
	}
	o, err := s.open(ctx, c, dsn)
	if err != nil {
		return nil, err // not a store's nil pointer in an interface
	}
	return o, nil
}

// DSNStore is the store a DSN given without one names (--dsn): the store
// of its URL scheme (postgres:// is PostgreSQL's), mysql for any other.
func DSNStore(dsn string) string {
	scheme, _, isURL := strings.Cut(dsn, "://")
	fallback := ""
	for _, s := range stores {
		if s.dsn == nil {
			continue
		}
		if len(s.dsn.schemes) == 0 {
			fallback = s.name
		}
		if isURL && slices.Contains(s.dsn.schemes, scheme) {
			return s.name
		}
	}
	return fallback
}

// SetDSN puts a DSN given on the command line (--dsn) where the
// configured store reads it, in place of the DSN's file or variable; a
// store that no DSN names takes none.
func (c *Config) SetDSN(dsn string) {
	if s, _ := c.store(); s.dsn != nil {
		s.dsn.set(c, dsn)
	}
}

// ErrUsage marks a command line that cannot be understood, or that does
// not give what a command needs.
var ErrUsage = errors.New("usage")

// ErrNoMigration: the configured store needs no migration.
var ErrNoMigration = errors.New("needs no migration")

// MigrationStore is the store postino migrate brings up to date when its
// command line names none: the configured store, when it has a schema,
// else the store a DSN names by default (DSNStore).
func (c *Config) MigrationStore() string {
	if s, _ := c.store(); s.migrate != nil {
		return c.Outbox.Backend
	}
	return DSNStore("")
}

// MigrateOutbox brings the schema of the configured store up to date,
// tells migrated the versions it applied and the schema's, then takes over
// the messages an outbox of the seed layout left (postino migrate). An
// error wrapping ErrNoMigration says why the store needs none; one
// wrapping ErrUsage, what the configuration lacks.
func (c *Config) MigrateOutbox(ctx context.Context, migrated func(applied []int, version int)) (backends.Adoption, error) {
	s, ok := storeNamed(c.Outbox.Backend)
	switch {
	case ok && s.migrate == nil:
		return backends.Adoption{}, fmt.Errorf("the %s outbox %w%s", s.name, ErrNoMigration, s.noMigration)
	case !ok:
		return backends.Adoption{}, fmt.Errorf("%w: migrate --backend %q: use %s (%s need no migration)", ErrUsage, c.Outbox.Backend,
			storeNames(func(s outboxStore) bool { return s.migrate != nil }, "or"),
			storeNames(func(s outboxStore) bool { return s.migrate == nil }, "and"))
	}
	if s.dsn != nil {
		if dsn, file, env := s.dsn.of(c); *dsn == "" && *file == "" && *env == "" {
			return backends.Adoption{}, fmt.Errorf("%w: migrate needs the %s DSN: give --dsn %s, set %s, or set %s.dsn, dsn_file or dsn_env in the --config file",
				ErrUsage, s.dsn.kind, s.dsn.form, envName(s.dsn.key+".dsn"), s.dsn.key)
		}
	}
	dsn, err := c.dsn(s, os.Getenv)
	if err != nil {
		return backends.Adoption{}, err
	}
	return s.migrate(ctx, c, dsn, migrated)
}

// CreateOutbox makes a new, empty outbox named name where the configured
// store's settings name its server (a database on the MySQL or PostgreSQL
// server of its DSN, a DynamoDB table), points them at it, and brings its
// schema up to date; drop removes it. postino's benchmarks fill one.
func (c *Config) CreateOutbox(ctx context.Context, name string) (drop func() error, err error) {
	s, err := c.store()
	if err != nil {
		return nil, err
	}
	drop = func() error { return nil }
	if s.create != nil {
		dsn, err := c.dsn(s, os.Getenv)
		if err != nil {
			return nil, err
		}
		var newDSN string
		if newDSN, drop, err = s.create(ctx, c, dsn, name); err != nil {
			return nil, err
		}
		if s.dsn != nil {
			s.dsn.set(c, newDSN)
		}
	}
	if s.migrate != nil {
		dsn, err := c.dsn(s, os.Getenv)
		if err == nil {
			_, err = s.migrate(ctx, c, dsn, func([]int, int) {})
		}
		if err != nil {
			return drop, fmt.Errorf("migrate %s: %w", name, err)
		}
	}
	return drop, nil
}

// mysqlOptions are the MySQL outbox's options but its DSN; maxConns, when
// not 0, bounds its connections in place of outbox.mysql.max_conns.
func (c *Config) mysqlOptions(maxConns int) mysql.Options {
	return mysql.Options{CAFile: c.Outbox.MySQL.TLSCAFile, MaxConns: cmp.Or(maxConns, c.Outbox.MySQL.MaxConns)}
}

// migrateMySQL migrates a MySQL outbox, on two connections.
func migrateMySQL(ctx context.Context, c *Config, dsn string, migrated func([]int, int)) (backends.Adoption, error) {
	db, err := mysql.Connect(ctx, dsn, c.mysqlOptions(2))
	if err != nil {
		return backends.Adoption{}, err
	}
	defer db.Close()
	return schema[*sql.DB]{mysql.Migrate, mysql.SchemaVersion, mysql.Adopt}.migrate(ctx, db, migrated)
}

// migratePostgres migrates a PostgreSQL outbox, on two connections.
func migratePostgres(ctx context.Context, _ *Config, dsn string, migrated func([]int, int)) (backends.Adoption, error) {
	pool, err := postgres.Connect(ctx, dsn, postgres.Options{MaxConns: 2})
	if err != nil {
		return backends.Adoption{}, err
	}
	defer pool.Close()
	version := func(ctx context.Context, pool *pgxpool.Pool) (int, error) { return postgres.SchemaVersion(ctx, pool) }
	return schema[*pgxpool.Pool]{postgres.Migrate, version, postgres.Adopt}.migrate(ctx, pool, migrated)
}

// schema is how a SQL store migrates its database D (its package's
// Migrate, SchemaVersion and Adopt).
type schema[D any] struct {
	apply   func(context.Context, D) ([]int, error)
	version func(context.Context, D) (int, error)
	adopt   func(context.Context, D) (backends.Adoption, error)
}

// migrate brings db's schema up to date, tells migrated the versions it
// applied and the schema's, then takes over the seed layout's messages.
func (s schema[D]) migrate(ctx context.Context, db D, migrated func([]int, int)) (backends.Adoption, error) {
	applied, err := s.apply(ctx, db)
	if err != nil {
		return backends.Adoption{}, err
	}
	v, err := s.version(ctx, db)
	if err != nil {
		return backends.Adoption{}, err
	}
	migrated(applied, v)
	return s.adopt(ctx, db)
}

// createMySQL makes a database on the server of the MySQL DSN, which
// names none, and returns its DSN.
func createMySQL(ctx context.Context, c *Config, server, name string) (string, func() error, error) {
	drop, err := createDatabase(ctx, name, "", func(ctx context.Context, query string) error {
		db, err := mysql.Connect(ctx, server, c.mysqlOptions(1))
		if err != nil {
			return err
		}
		defer db.Close()
		_, err = db.ExecContext(ctx, query)
		return err
	})
	return server + name, drop, err
}

// createPostgres makes a database on the server of the PostgreSQL DSN, a
// URL, and returns its DSN.
func createPostgres(ctx context.Context, _ *Config, server, name string) (string, func() error, error) {
	u, err := url.Parse(server)
	if err != nil || u.Scheme == "" {
		return "", nil, fmt.Errorf("%s: give a postgres:// URL (%v)", server, err)
	}
	drop, err := createDatabase(ctx, name, " WITH (FORCE)", func(ctx context.Context, query string) error {
		pool, err := postgres.Connect(ctx, server, postgres.Options{MaxConns: 1})
		if err != nil {
			return err
		}
		defer pool.Close()
		_, err = pool.Exec(ctx, query)
		return err
	})
	u.Path = "/" + name
	return u.String(), drop, err
}

// createDatabase makes database name with exec, which runs a statement
// on the server, and returns what drops it (DROP DATABASE, then force).
func createDatabase(ctx context.Context, name, force string, exec func(ctx context.Context, query string) error) (func() error, error) {
	if err := exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	return func() error { return exec(context.Background(), "DROP DATABASE "+name+force) }, nil
}

// createDynamoDB makes a table of that name, as postino dynamodb
// create-table does, and points the settings at it.
func createDynamoDB(ctx context.Context, c *Config, _, name string) (string, func() error, error) {
	c.Outbox.DynamoDB.Table = name
	opts := c.dynamoDBOptions()
	if _, _, err := dynamodb.CreateTable(ctx, opts); err != nil {
		return "", nil, err
	}
	return "", func() error {
		client, _, err := dynamodb.Client(context.Background(), opts)
		if err != nil {
			return err
		}
		_, err = client.DeleteTable(context.Background(), &awsdynamodb.DeleteTableInput{TableName: aws.String(name)})
		return err
	}, nil
}

// dynamoDBOptions are the DynamoDB outbox's options.
func (c *Config) dynamoDBOptions() dynamodb.Options {
	d := c.Outbox.DynamoDB
	return dynamodb.Options{Table: d.Table, Endpoint: d.Endpoint, Region: d.Region, TTL: d.TTL.D()}
}

// boltPath is where the embedded outbox lives.
func (c *Config) boltPath() string {
	if c.Outbox.Bolt.Path != "" {
		return c.Outbox.Bolt.Path
	}
	return filepath.Join(c.DataDir, "outbox.db")
}

// checkTTL keeps DynamoDB's TTL longer than a message may wait to be sent.
// A message's bytes expire ttl after it was accepted, its record ttl after
// its last change: past max_age a message ends as expired at its next
// attempt, and never needs its bytes again.
func checkTTL(c *Config) error {
	ttl, maxAge := c.Outbox.DynamoDB.TTL, c.Delivery.Retry.MaxAge
	if ttl > 0 && ttl <= maxAge {
		return fmt.Errorf("outbox.dynamodb.ttl %s is not longer than delivery.retry.max_age %s: DynamoDB would drop the bytes of messages "+
			"still to be sent; make the ttl longer (a day more at least) or 0 for no TTL", ttl.D(), maxAge.D())
	}
	return nil
}
