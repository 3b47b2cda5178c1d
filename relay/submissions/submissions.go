// Package submissions reads the mail an app writes into a table of its own
// database, in its own transaction, and takes each message into the outbox
// as SMTP intake would (intake.Server.Take): the transactional outbox,
// with Postino as its reader.
//
// A reader claims rows with SELECT … FOR UPDATE SKIP LOCKED, so that
// several relays may read one table; it deletes them in the claiming
// transaction, which commits only once the outbox holds their messages (or
// their refusals). A crash in between leaves the rows, which are taken
// again: a row's id, the message's X-Genro-Mail-ID, makes the second take
// a no-op.
package submissions

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/internal/claimloop"
	"github.com/genropy/postino/relay/intake"
)

// Intake is what a reader needs of the SMTP side: the same checks, and the
// same way into the outbox.
type Intake interface {
	CheckEnvelope(env intake.Envelope, size int64) error
	Take(ctx context.Context, env intake.Envelope, r io.Reader) (string, error)
	Refuse(ctx context.Context, env intake.Envelope, raw []byte, reason string) (string, error)
}

// Config is one submissions table.
type Config struct {
	// Driver is postgres or mysql.
	Driver string
	DSN    string
	// Table defaults to DefaultTable.
	Table string
	// Poll is how often the table is read when nothing wakes the reader
	// (on PostgreSQL, NOTIFY wakes it at each COMMIT).
	Poll time.Duration
	// Batch is how many rows one claim takes, Concurrency how many of
	// them are taken at once.
	Batch       int
	Concurrency int
	// Name says where a message was read, in its history and Received
	// field; default driver:table.
	Name string
}

// Reader takes the submissions of one table.
type Reader struct {
	cfg     Config
	dialect dialect
	db      *sql.DB
	intake  Intake
	log     *slog.Logger
	sig     *claimloop.Signals
	// queued and refused count the rows taken, failures the batches that
	// could not be.
	queued, refused, failures prometheus.Counter

	mu sync.Mutex
	// state is, for each claimer, why its last batch failed, nil after
	// one that did not: one claimer's success does not hide the other's
	// failure.
	state [claimers]*failure
	// logged is the cause of failure last logged, "" when none: the log
	// says when the reader's state changes, not at every retry.
	logged cause
}

// WithDefaults returns c with what it leaves out filled in: the table
// DefaultTable, the name driver:table, a poll of a second, batches of 256
// rows, 32 rows taken at once.
func (c Config) WithDefaults() Config {
	c.Table = cmp.Or(c.Table, DefaultTable)
	c.Name = cmp.Or(c.Name, c.Driver+":"+c.Table)
	c.Poll = cmp.Or(c.Poll, time.Second)
	c.Batch = cmp.Or(c.Batch, 256)
	c.Concurrency = cmp.Or(c.Concurrency, 32)
	return c
}

// Open prepares the connections to the database of cfg (WithDefaults);
// Run reads it.
func Open(cfg Config, in Intake, m *Metrics, log *slog.Logger) (*Reader, error) {
	cfg = cfg.WithDefaults()
	d, err := lookup(cfg.Driver, cfg.Table)
	if err != nil {
		return nil, err
	}
	// sql.Open connects to nothing: only a DSN it cannot parse fails here.
	// A database that is down, missing, or refuses the user is what the
	// reader meets at its claims, and the relay starts degraded meanwhile.
	db, err := sql.Open(d.driver, cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("submissions %s: the DSN cannot be read: %w", cfg.Name, err)
	}
	return &Reader{cfg: cfg, dialect: d, db: db, intake: in, log: log.With("submissions", cfg.Name), sig: claimloop.NewSignals(),
		queued: m.taken.WithLabelValues(cfg.Name, "queued"), refused: m.taken.WithLabelValues(cfg.Name, "refused"),
		failures: m.failures.WithLabelValues(cfg.Name)}, nil
}

// claimers is how many batches a reader takes at once: while one is taken
// into the outbox, the next is claimed (SKIP LOCKED keeps them apart), so
// that the outbox is never idle between batches.
const claimers = 2

// Close closes the connections to the database.
func (r *Reader) Close() error { return r.db.Close() }

// Name says where the reader reads.
func (r *Reader) Name() string { return r.cfg.Name }

// Ready says why the last batch could not be taken, or nil: the relay is
// degraded meanwhile, since the app's mail waits in its table.
func (r *Reader) Ready() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range r.state {
		if f != nil {
			return f
		}
	}
	return nil
}

// report keeps how the claimer's last batch went, and logs the reader's
// state when it changes: the cause of a failure, not each retry.
func (r *Reader) report(claimer int, err error) {
	var f *failure
	if err != nil {
		f = r.diagnose(err)
		r.failures.Inc()
		r.log.Debug("submissions: cannot take the submissions; retrying", "error", f)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state[claimer] = f
	var now *failure
	for _, f := range r.state {
		if f != nil {
			now = f
			break
		}
	}
	switch {
	case now != nil && now.cause != r.logged:
		r.log.Warn("submissions: cannot read the table; the relay takes SMTP mail meanwhile and reads it again when it can", "error", now)
		r.logged = now.cause
	case now == nil && r.logged != "":
		r.log.Info("submissions: the table is read again")
		r.logged = ""
	}
}

// Wake tells the reader that rows may be waiting.
func (r *Reader) Wake() { r.sig.Wake() }

// Run takes submissions until ctx ends; the batches in hand when it ends
// are finished first.
func (r *Reader) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if r.cfg.Driver == "postgres" {
		wg.Go(func() { r.listen(ctx) })
	}
	for i := range claimers {
		wg.Go(func() {
			claimloop.Run(ctx, r.sig, claimloop.Stage[struct{}]{
				Poll: r.cfg.Poll, Report: func(err error) { r.report(i, err) },
				Claim: func() (claimloop.Result, error) {
					n, err := r.takeBatch(context.WithoutCancel(ctx))
					if n == r.cfg.Batch {
						return claimloop.More, err
					}
					return claimloop.Drained, err
				},
			})
		})
	}
	wg.Wait()
}

// takeBatch claims a batch of rows, deletes them, takes each into the
// outbox, and commits, and returns how many it took. The delete comes
// before the takes, so that the statement the database may refuse (a
// deadlock with another claimer, which rolls the transaction back) is
// refused before anything is in the outbox. When the relay cannot take a
// row now (the outbox, the spool), the transaction is rolled back: the
// rows come back for the next claim, and those taken already are answered
// as done then, by their ids.
func (r *Reader) takeBatch(ctx context.Context) (int, error) {
	tx, err := r.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := r.claim(ctx, tx)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	ids := make([]string, len(rows))
	for i, row := range rows {
		ids[i] = row.id
	}
	q, args := r.dialect.remove(r.cfg.Table, ids)
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return 0, fmt.Errorf("delete the submissions claimed: %w", err)
	}
	var (
		mu    sync.Mutex
		first error
		slots = make(chan struct{}, r.cfg.Concurrency)
		wg    sync.WaitGroup
	)
	for _, row := range rows {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := r.take(ctx, row); err != nil {
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if first != nil {
		return 0, first
	}
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("commit the submissions taken: %w", err)
	}
	return len(rows), nil
}

// claim reads and locks a batch of rows.
func (r *Reader) claim(ctx context.Context, tx *sql.Tx) ([]*row, error) {
	q, args := r.dialect.claim(r.cfg.Table), []any{r.cfg.Batch}
	if r.dialect.lock != nil {
		ids, err := r.pick(ctx, tx)
		if err != nil || len(ids) == 0 {
			return nil, err
		}
		q, args = r.dialect.lock(r.cfg.Table, ids)
	}
	rs, err := tx.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("claim submissions: %w", err)
	}
	defer rs.Close()
	var out []*row
	for rs.Next() {
		var row row
		if err := row.scan(rs); err != nil {
			return nil, fmt.Errorf("read a submission: %w", err)
		}
		out = append(out, &row)
	}
	return out, rs.Err()
}

// pick returns the ids of the rows the claim of a two-step dialect skips
// none of.
func (r *Reader) pick(ctx context.Context, tx *sql.Tx) ([]string, error) {
	rs, err := tx.QueryContext(ctx, r.dialect.claim(r.cfg.Table), r.cfg.Batch)
	if err != nil {
		return nil, fmt.Errorf("claim submissions: %w", err)
	}
	defer rs.Close()
	var ids []string
	for rs.Next() {
		var id string
		if err := rs.Scan(&id); err != nil {
			return nil, fmt.Errorf("read a submission's id: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rs.Err()
}

// take takes one row into the outbox: as a message, or as a refusal when
// it fails the checks. It returns an error when the row must stay.
func (r *Reader) take(ctx context.Context, row *row) error {
	env, err := row.envelope(r.cfg.Name)
	var raw []byte
	if err == nil {
		raw, err = row.bytes()
	}
	if err != nil {
		// The row itself is malformed: no message to check.
		return r.refuse(ctx, env, row, raw, err.Error())
	}
	err = r.intake.CheckEnvelope(env, int64(len(raw)))
	if err == nil {
		_, err = r.intake.Take(ctx, env, bytes.NewReader(raw))
	}
	if err == nil {
		r.queued.Inc()
		return nil
	}
	if refused, ok := errors.AsType[*intake.Refusal](err); ok && refused.Permanent() {
		return r.refuse(ctx, env, row, raw, refused.Message)
	}
	return fmt.Errorf("submission %s: %w", row.id, err)
}

// refuse records row as refused, so that the app hears why.
func (r *Reader) refuse(ctx context.Context, env intake.Envelope, row *row, raw []byte, reason string) error {
	env.ID = row.id
	id, err := r.intake.Refuse(ctx, env, raw, reason)
	if err != nil {
		return fmt.Errorf("submission %s: record its refusal (%s): %w", row.id, reason, err)
	}
	r.log.Warn("submission refused: its message is INVALID", "submission", row.id, "id", id, "reason", reason)
	r.refused.Inc()
	return nil
}
