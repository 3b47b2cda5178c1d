// Package postgres is the outbox in PostgreSQL, in the seed's emails and
// email_statuses tables extended by numbered migrations, so that several
// relays can share it. Claims lock with FOR UPDATE SKIP LOCKED, and the
// transactions that make work due NOTIFY the relays that LISTEN.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// Options tune the store.
type Options struct {
	// MaxConns bounds the connections to the database; 0 is
	// DefaultMaxConns. (TLS is the DSN's: sslmode, sslrootcert.)
	MaxConns int
}

// DefaultMaxConns is the connections a store opens at most when Options
// set no bound.
const DefaultMaxConns = 32

// Store is an outbox in PostgreSQL.
//
// Creates, transitions, event updates and claims go through one group
// commit (internal/groupcommit) that runs every one waiting in a single
// database transaction: one commit, one WAL flush, and one statement per
// table for a whole group of callers (txRows).
type Store struct {
	pool *pgxpool.Pool
	// sql is the store as the code the SQL stores share drives it.
	sql     sqlstore.Store
	commits *sqlstore.GroupCommit[*op]
	// Suppressions is the suppression list, its statements of values
	// within bodyBudget (arrays: one parameter a column, the bound of
	// 65,535 never near).
	sqlstore.Suppressions
	// Documents are the keyed documents relays share (backends.Documents).
	sqlstore.Documents
	// Batches are the suspended batches and the brake's tallies.
	sqlstore.Batches
	// bodyBudget bounds the message bytes of one statement.
	bodyBudget int
	// sender names this store in its notifications, so that Listen passes
	// on only those of other stores (other relays): the relay wakes its
	// own workers as it hands them work.
	sender string
	// afterCommit, set by tests, answers in place of a COMMIT that landed:
	// a connection lost on the reply makes a commit whose outcome the
	// store cannot know.
	afterCommit func() error
}

var _ backends.Outbox = (*Store)(nil)

// Connect opens the database without looking at its schema: for Migrate.
func Connect(ctx context.Context, dsn string, opts Options) (*pgxpool.Pool, error) {
	cfg, err := parseDSN(dsn)
	if err != nil {
		return nil, err
	}
	if opts.MaxConns <= 0 {
		opts.MaxConns = DefaultMaxConns
	}
	cfg.MaxConns = int32(opts.MaxConns)
	cfg.MaxConnLifetime = time.Hour
	// Each statement is planned for its values, as TestPlans explains it:
	// a generic plan, which PostgreSQL may pick for a prepared statement
	// after five runs, cannot see that a status is READY or a time now,
	// and may read a range the values would have bounded.
	cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		utcTimes(c)
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("PostgreSQL at %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	return pool, nil
}

// CheckDSN reports what Connect would refuse in dsn before it reaches the
// database: a DSN it cannot read, a TLS file it names that cannot be used.
func CheckDSN(dsn string) error {
	_, err := parseDSN(dsn)
	return err
}

func parseDSN(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL DSN: %w (the form is postgres://user:password@host:5432/database)", err)
	}
	return cfg, nil
}

// utcTimes makes c read times in UTC, as the other stores give them.
func utcTimes(c *pgx.Conn) {
	c.TypeMap().RegisterType(&pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID,
		Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}})
}

// ErrSchemaBehind: the database lacks migrations this binary needs.
var ErrSchemaBehind = errors.New("the outbox schema is behind")

// Open opens the store, refusing a schema that is behind.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	pool, err := Connect(ctx, dsn, opts)
	if err != nil {
		return nil, err
	}
	v, err := SchemaVersion(ctx, pool)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if want := LatestVersion(); v < want {
		pool.Close()
		return nil, fmt.Errorf("%w: it is at version %d, this postino needs %d; run: postino migrate --backend postgres --dsn DSN", ErrSchemaBehind, v, want)
	}
	st := &Store{pool: pool, bodyBudget: defaultBodyBudget, sender: backends.Nonce()}
	st.sql = sqlstore.Store{DB: pgDB{pool}, Scan: scanMessage, ScanEvent: scanEvent, ScanID: scanID, ByID: byIDStmt,
		InTx: st.inTx, Fault: fault, Time: ts}
	st.Suppressions = sqlstore.NewSuppressions(st.sql, suppressionStmts{}, st.bodyBudget)
	st.Documents = sqlstore.NewDocuments(st.sql, documentStmts)
	st.Batches = sqlstore.NewBatches(st.sql, batchStmts{})
	st.commits = sqlstore.NewGroupCommit(commitConfig, st.commit, func(w sqlstore.Write) *op { return &op{Write: w} })
	return st, nil
}

// Close waits for the writes handed over already and closes the database.
func (s *Store) Close() error {
	s.commits.Close()
	s.pool.Close()
	return nil
}

func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// PostgreSQL's error codes the store tells apart.
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
	codeUndefinedTable      = "42P01"
)

func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// retryable are the errors after which a transaction runs again:
// serialization failures and deadlocks.
func retryable(err error) bool {
	c := pgCode(err)
	return c == "40001" || c == "40P01"
}

// tx runs fn in a transaction (READ COMMITTED, PostgreSQL's default), again
// after a deadlock, with jittered backoff. A COMMIT that fails otherwise
// may have landed (its reply was lost with the connection): its error is
// backends.ErrOutcomeUnknown.
func (s *Store) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return sqlstore.Retry(retryable, func() error { return s.attempt(ctx, fn) })
}

// attempt runs fn in one transaction.
func (s *Store) attempt(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	err = tx.Commit(ctx)
	if err == nil && s.afterCommit != nil {
		err = s.afterCommit()
	}
	if err != nil && !retryable(err) {
		return fmt.Errorf("%w: %w", backends.ErrOutcomeUnknown, err)
	}
	return err
}

// inTx runs fn in a transaction (tx) over the rows it locks.
func (s *Store) inTx(ctx context.Context, fn func(sqlstore.Tx) error) error {
	return s.tx(ctx, func(tx pgx.Tx) error { return fn(newTxRows(ctx, tx, s.sender)) })
}

// querier is the pool or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// pgDB is q as the code the SQL stores share (sqlstore) runs statements on
// it.
type pgDB struct{ q querier }

func (d pgDB) Query(ctx context.Context, query string, args ...any) (sqlstore.Result, error) {
	return d.q.Query(ctx, query, args...)
}

func (d pgDB) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := d.q.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

// fault reads what err says, where the shared code tells errors apart.
func fault(err error) sqlstore.Fault {
	switch pgCode(err) {
	case codeUniqueViolation:
		return sqlstore.KeyTaken
	case codeForeignKeyViolation:
		return sqlstore.NoParent
	case codeUndefinedTable:
		return sqlstore.NoTable
	}
	return sqlstore.OtherFault
}

// stmt is a statement with its arguments. The hot statements are built by
// functions named after them (claimStmt, listStatusStmt, …), which the
// store runs and TestPlans explains, so that the plans tested are those of
// the statements run.
type stmt = sqlstore.Stmt

// null makes "" a NULL.
func null(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullBytes(b []byte) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}

// maxTime is the latest time the store writes: a caller's "never" (the
// end of Go's times) is past what timestamptz holds.
var maxTime = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// ts is a time as the columns keep it: in UTC, to the microsecond,
// truncated (PostgreSQL would round, and a lease compared after a round
// trip must be the one written; see backends.SameLease).
func ts(t time.Time) time.Time {
	if t.After(maxTime) {
		return maxTime
	}
	return t.UTC().Truncate(time.Microsecond)
}

// nullTime is ts, with the zero time a NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	v := ts(t)
	return &v
}

// scanID reads a row of an id.
func scanID(r sqlstore.Scanner) (string, error) {
	var id string
	err := r.Scan(&id)
	return id, err
}

// str reads a nullable text column.
func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// tm reads a nullable time column.
func tm(p *time.Time) time.Time {
	if p == nil {
		return time.Time{}
	}
	return *p
}
