// Package mysql is the outbox in MySQL or MariaDB, in the seed's emails and
// email_statuses tables extended by numbered migrations, so that several
// relays can share it.
package mysql

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// Options tune the store.
type Options struct {
	// CAFile, when set, holds the authorities that sign the server's TLS
	// certificate; TLS is then required.
	CAFile string
	// MaxConns bounds the connections to the database; 0 is
	// DefaultMaxConns.
	MaxConns int
}

// DefaultMaxConns is the connections a store opens at most when Options
// set no bound.
const DefaultMaxConns = 32

// Store is an outbox in MySQL or MariaDB.
//
// Creates, transitions, event updates and claims go through one group
// commit (internal/groupcommit) that runs every one waiting in a single
// database transaction: one commit, one log flush, and one statement per
// table for a whole group of callers (txRows).
type Store struct {
	db *sql.DB
	// sql is the store as the code the SQL stores share drives it.
	sql     sqlstore.Store
	commits *sqlstore.GroupCommit[*op]
	// Suppressions is the suppression list, its statements of values
	// within bodyBudget.
	sqlstore.Suppressions
	// Documents are the keyed documents relays share (backends.Documents).
	sqlstore.Documents
	// Batches are the suspended batches and the brake's tallies.
	sqlstore.Batches
	// bodyBudget bounds the message bytes of one statement, so that it
	// stays within the server's max_allowed_packet (see bodyBudgetOf).
	bodyBudget int
	// afterCommit, set by tests, answers in place of a COMMIT that landed:
	// a connection lost on the reply makes a commit whose outcome the
	// store cannot know.
	afterCommit func() error
}

var _ backends.Outbox = (*Store)(nil)

// Connect opens the database without looking at its schema: for Migrate.
// TLS is used when the DSN asks for it (tls=true, skip-verify, preferred)
// or when opts.CAFile is set.
func Connect(ctx context.Context, dsn string, opts Options) (*sql.DB, error) {
	cfg, err := connConfig(dsn, opts)
	if err != nil {
		return nil, err
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("MySQL: %w", err)
	}
	db := sql.OpenDB(readCommitted{conn})
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	db.SetMaxOpenConns(opts.MaxConns)
	db.SetMaxIdleConns(opts.MaxConns)
	db.SetConnMaxLifetime(time.Hour)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("MySQL at %s: %w", cfg.Addr, err)
	}
	return db, nil
}

// CheckDSN reports what Connect would refuse in dsn and opts before it
// reaches the database: a DSN it cannot read, a CA file it cannot use.
func CheckDSN(dsn string, opts Options) error {
	_, err := connConfig(dsn, opts)
	return err
}

// connConfig is the driver's configuration of dsn and opts.
func connConfig(dsn string, opts Options) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("MySQL DSN: %w (the form is user:password@tcp(host:3306)/database)", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	// The driver sends a time with its nanoseconds, a value no DATETIME(6)
	// holds: MariaDB then uses no index range on the column. Microseconds
	// are what the columns keep anyway.
	if err := cfg.Apply(mysql.TimeTruncate(time.Microsecond)); err != nil {
		return nil, fmt.Errorf("MySQL: %w", err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("MySQL TLS: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("MySQL TLS: %s holds no PEM certificate", opts.CAFile)
		}
		host := cfg.Addr
		if i := strings.LastIndex(host, ":"); i > 0 {
			host = host[:i]
		}
		cfg.TLS = &tls.Config{RootCAs: pool, ServerName: host, MinVersion: tls.VersionTLS12}
	}
	// Arguments go inside the statement's text: one round trip per
	// statement, where a prepared one takes three.
	cfg.InterpolateParams = true
	// An insert's affected rows must count the rows it added, not those
	// it found: a create learns from them that no id was taken.
	cfg.ClientFoundRows = false
	// A transaction's last writes go in one query (execAll): a round trip
	// where they took one each. Every value still goes as an argument,
	// escaped by the driver, never inside the statement's text.
	cfg.MultiStatements = true
	return cfg, nil
}

// readCommitted opens sessions in READ COMMITTED, so that a transaction
// starts with one statement: a transaction that asks for its isolation
// level costs one more each time. A system variable among cfg.Params (as
// time_zone is) cannot do it everywhere: MySQL 8 knows only
// transaction_isolation, MariaDB before 11.1 only tx_isolation.
type readCommitted struct{ driver.Connector }

func (c readCommitted) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	ex, ok := conn.(driver.ExecerContext)
	if !ok {
		conn.Close()
		return nil, errors.New("MySQL: the driver's connections do not execute statements")
	}
	if _, err := ex.ExecContext(ctx, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", nil); err != nil {
		conn.Close()
		return nil, fmt.Errorf("MySQL: %w", err)
	}
	return conn, nil
}

// ErrSchemaBehind: the database lacks migrations this binary needs.
var ErrSchemaBehind = errors.New("the outbox schema is behind")

// Open opens the store, refusing a schema that is behind.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	db, err := Connect(ctx, dsn, opts)
	if err != nil {
		return nil, err
	}
	v, err := SchemaVersion(ctx, db)
	if err != nil {
		db.Close()
		return nil, err
	}
	if want := LatestVersion(); v < want {
		db.Close()
		return nil, fmt.Errorf("%w: it is at version %d, this postino needs %d; run: postino migrate --backend mysql --dsn DSN", ErrSchemaBehind, v, want)
	}
	var packet int
	if err := db.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&packet); err != nil {
		db.Close()
		return nil, fmt.Errorf("MySQL: read max_allowed_packet: %w", err)
	}
	st := &Store{db: db, bodyBudget: bodyBudgetOf(packet)}
	st.sql = sqlstore.Store{DB: sqlDB{db}, Scan: scanMessage, ScanEvent: scanEvent, ScanID: scanID, ByID: byIDStmt,
		InTx: st.inTx, Fault: fault, Time: clamp}
	st.Suppressions = sqlstore.NewSuppressions(st.sql, suppressionStmts{}, st.bodyBudget)
	st.Documents = sqlstore.NewDocuments(st.sql, documentStmts)
	st.Batches = sqlstore.NewBatches(st.sql, batchStmts{})
	st.commits = sqlstore.NewGroupCommit(commitConfig, st.commit, func(w sqlstore.Write) *op { return &op{Write: w} })
	return st, nil
}

// Close waits for the writes handed over already and closes the database.
func (s *Store) Close() error {
	s.commits.Close()
	return s.db.Close()
}
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// retryable are the errors after which a transaction runs again: deadlocks
// and lock wait timeouts.
func retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// tx runs fn in a transaction (READ COMMITTED, the sessions' level), again
// after a deadlock or a lock wait timeout, with jittered backoff. A COMMIT
// that fails otherwise may have landed (its reply was lost with the
// connection): its error is backends.ErrOutcomeUnknown.
func (s *Store) tx(ctx context.Context, fn func(*txn) error) error {
	return sqlstore.Retry(retryable, func() error { return s.attempt(ctx, fn) })
}

// inTx runs fn in a transaction (tx) over the rows it locks.
func (s *Store) inTx(ctx context.Context, fn func(sqlstore.Tx) error) error {
	return s.tx(ctx, func(tx *txn) error { return fn(newTxRows(ctx, tx)) })
}

// attempt runs fn in one transaction.
func (s *Store) attempt(ctx context.Context, fn func(*txn) error) error {
	tx, err := begin(ctx, s.db)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if s.afterCommit == nil {
		return nil
	}
	err = s.afterCommit()
	if err != nil && !retryable(err) {
		return fmt.Errorf("%w: %w", backends.ErrOutcomeUnknown, err)
	}
	return err
}

const messageCols = `id, status, eml_file_path, payload_file_path, reason, version, created_at, updated_at,
	message_id, priority, batch_code, due_at, attempts, lease_until, route, envelope, results`

// stmt is a statement with its arguments. The hot statements are built by
// functions named after them (claimPickStmt, listStatusStmt, …), which the
// store runs and TestPlans explains, so that the plans tested are those of
// the statements run.
type stmt = sqlstore.Stmt

// scanMessage reads a row of messageCols, then extra.
func scanMessage(r sqlstore.Scanner, extra ...any) (*backends.Message, error) {
	var (
		m                                              backends.Message
		eml, payload, reason, msgid, batch, route, env sql.NullString
		results                                        sql.NullString
		due, lease                                     sql.NullTime
	)
	err := r.Scan(append([]any{&m.ID, &m.Status, &eml, &payload, &reason, &m.Version, &m.CreatedAt, &m.UpdatedAt,
		&msgid, &m.Priority, &batch, &due, &m.Attempts, &lease, &route, &env, &results}, extra...)...)
	if err != nil {
		return nil, err
	}
	m.ID = strings.TrimRight(m.ID, " ")
	m.EmlPath, m.PayloadPath, m.Reason, m.MessageID, m.Batch, m.Route = eml.String, payload.String, reason.String, msgid.String, batch.String, route.String
	m.DueAt, m.LeaseUntil = due.Time, lease.Time
	if env.Valid && env.String != "" {
		if err := json.Unmarshal([]byte(env.String), &m.Envelope); err != nil {
			return nil, fmt.Errorf("message %s: stored envelope is unreadable: %w", m.ID, err)
		}
	}
	if results.Valid && results.String != "" {
		if err := json.Unmarshal([]byte(results.String), &m.Results); err != nil {
			return nil, fmt.Errorf("message %s: stored results are unreadable: %w", m.ID, err)
		}
	}
	return &m, nil
}

func null(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func nullTime(t time.Time) sql.NullTime { return sql.NullTime{Time: t.UTC(), Valid: !t.IsZero()} }

// querier is a database or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// sqlDB is q as the code the SQL stores share (sqlstore) runs statements
// on it.
type sqlDB struct{ q querier }

func (d sqlDB) Query(ctx context.Context, query string, args ...any) (sqlstore.Result, error) {
	rows, err := d.q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return result{rows}, nil
}

func (d sqlDB) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := d.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// result is rows as sqlstore reads them.
type result struct{ *sql.Rows }

func (r result) Close() { r.Rows.Close() }

// fault reads what err says, where the shared code tells errors apart.
func fault(err error) sqlstore.Fault {
	var me *mysql.MySQLError
	if !errors.As(err, &me) {
		return sqlstore.OtherFault
	}
	switch me.Number {
	case 1062: // duplicate entry
		return sqlstore.KeyTaken
	case 1452: // a foreign key names no row
		return sqlstore.NoParent
	case 1146: // no such table
		return sqlstore.NoTable
	}
	return sqlstore.OtherFault
}

func queryMessages(ctx context.Context, q querier, st stmt) ([]*backends.Message, error) {
	return sqlstore.QueryAll(ctx, sqlDB{q}, scanOne, st)
}

// scanOne reads a row of messageCols.
func scanOne(r sqlstore.Scanner) (*backends.Message, error) { return scanMessage(r) }
