// Package mysql is the outbox in MySQL or MariaDB, in the seed's emails and
// email_statuses tables extended by numbered migrations, so that several
// relays can share it.
package mysql

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/genropy/postino/backends"
)

// Options tune the store.
type Options struct {
	// CAFile, when set, holds the authorities that sign the server's TLS
	// certificate; TLS is then required.
	CAFile string
	// MaxConns bounds the connections to the database.
	MaxConns int
}

// Store is an outbox in MySQL or MariaDB.
//
// Creates and transitions go through one writer that runs every one waiting
// in a single database transaction: one commit, one log flush, and the
// history rows of all in one statement, for a whole group of sessions.
type Store struct {
	db     *sql.DB
	ops    chan *op
	quit   chan struct{}
	done   chan struct{}
	closed sync.Once
}

var _ backends.Outbox = (*Store)(nil)

// Connect opens the database without looking at its schema: for Migrate.
// TLS is used when the DSN asks for it (tls=true, skip-verify, preferred)
// or when opts.CAFile is set.
func Connect(ctx context.Context, dsn string, opts Options) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("MySQL DSN: %w (the form is user:password@tcp(host:3306)/database)", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
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
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("MySQL: %w", err)
	}
	db := sql.OpenDB(conn)
	if opts.MaxConns <= 0 {
		opts.MaxConns = 32
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
	st := &Store{db: db, ops: make(chan *op), quit: make(chan struct{}), done: make(chan struct{})}
	go st.writer()
	return st, nil
}

func (s *Store) Close() error {
	s.closed.Do(func() {
		close(s.quit)
		<-s.done
	})
	return s.db.Close()
}
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// retryable are the errors after which a transaction runs again: deadlocks
// and lock wait timeouts.
func retryable(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205)
}

// tx runs fn in a READ COMMITTED transaction, again after a deadlock or a
// lock wait timeout, with jittered backoff.
func (s *Store) tx(ctx context.Context, fn func(*sql.Tx) error) error {
	backoff := 5 * time.Millisecond
	for attempt := 1; ; attempt++ {
		tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		err = fn(tx)
		if err == nil {
			err = tx.Commit()
		} else {
			tx.Rollback()
		}
		if err == nil || !retryable(err) || attempt == 8 {
			return err
		}
		time.Sleep(backoff/2 + rand.N(backoff))
		backoff *= 2
	}
}

const messageCols = `id, status, eml_file_path, payload_file_path, reason, version, created_at, updated_at,
	message_id, priority, batch_code, due_at, attempts, lease_until, route, envelope, results`

type scanner interface{ Scan(...any) error }

func scanMessage(r scanner) (*backends.Message, error) {
	var (
		m                                              backends.Message
		eml, payload, reason, msgid, batch, route, env sql.NullString
		results                                        sql.NullString
		due, lease                                     sql.NullTime
	)
	err := r.Scan(&m.ID, &m.Status, &eml, &payload, &reason, &m.Version, &m.CreatedAt, &m.UpdatedAt,
		&msgid, &m.Priority, &batch, &due, &m.Attempts, &lease, &route, &env, &results)
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

// queueAt is the time claims order a message by, as in the bbolt store.
func queueAt(st backends.Status, due, created, updated time.Time) time.Time {
	switch st {
	case backends.StatusReady:
		return due
	case backends.StatusAccepted:
		return created
	}
	return updated
}

func (s *Store) Create(ctx context.Context, m *backends.Message) error {
	if err := m.PrepareCreate(time.Now().UTC()); err != nil {
		return err
	}
	m.Version = 1
	if err := s.submit(ctx, &op{create: m}); err != nil {
		return fmt.Errorf("create message %s: %w", m.ID, err)
	}
	return nil
}

func (s *Store) Get(ctx context.Context, id string) (*backends.Message, error) {
	return getMessage(ctx, s.db, id, "")
}

// querier is a database or a transaction.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func getMessage(ctx context.Context, q querier, id, lock string) (*backends.Message, error) {
	m, err := scanMessage(q.QueryRowContext(ctx, "SELECT "+messageCols+" FROM emails WHERE id = ?"+lock, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("message %s: %w", id, backends.ErrNotFound)
	}
	return m, err
}

func queryMessages(ctx context.Context, q querier, query string, args ...any) ([]*backends.Message, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*backends.Message
	for rows.Next() {
		m, err := scanMessage(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

func (s *Store) History(ctx context.Context, id string) ([]backends.HistoryEntry, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT status, reason, created_at, details FROM email_statuses WHERE email_id = ? ORDER BY id", id)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []backends.HistoryEntry
	for rows.Next() {
		var e backends.HistoryEntry
		var reason, details sql.NullString
		if err := rows.Scan(&e.Status, &reason, &e.At, &details); err != nil {
			return nil, err
		}
		e.Reason = reason.String
		if details.Valid && details.String != "" {
			e.Details = json.RawMessage(details.String)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		if _, err := s.Get(ctx, id); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (s *Store) ByMessageID(ctx context.Context, messageID string) ([]*backends.Message, error) {
	return queryMessages(ctx, s.db, "SELECT "+messageCols+" FROM emails WHERE message_id = ? ORDER BY created_at, id", messageID)
}

// cursor is where a listing stopped.
type cursor struct {
	Priority int       `json:"p,omitempty"`
	At       time.Time `json:"a"`
	Created  time.Time `json:"c"`
	ID       string    `json:"i"`
}

func (s *Store) List(ctx context.Context, q backends.ListQuery) ([]*backends.Message, string, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	var after *cursor
	if q.After != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.After)
		after = new(cursor)
		if err != nil || json.Unmarshal(b, after) != nil {
			return nil, "", fmt.Errorf("list cursor %q was not given by this store", q.After)
		}
	}
	var query string
	var args []any
	if q.Status != "" {
		query = "SELECT " + messageCols + ", queue_at FROM emails WHERE status = ?"
		args = append(args, q.Status)
		if after != nil {
			query += " AND (priority, queue_at, created_at, id) > (?, ?, ?, ?)"
			args = append(args, after.Priority, after.At, after.Created, after.ID)
		}
		query += " ORDER BY priority, queue_at, created_at, id LIMIT ?"
	} else {
		query = "SELECT " + messageCols + ", queue_at FROM emails"
		if after != nil {
			query += " WHERE (created_at, id) < (?, ?)"
			args = append(args, after.Created, after.ID)
		}
		query += " ORDER BY created_at DESC, id DESC LIMIT ?"
	}
	args = append(args, q.Limit+1)
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	var out []*backends.Message
	var last cursor
	for rows.Next() {
		var qa sql.NullTime
		m, err := scanMessage(rowWith{rows, &qa})
		if err != nil {
			return nil, "", err
		}
		if len(out) == q.Limit {
			b, _ := json.Marshal(last)
			return out, base64.RawURLEncoding.EncodeToString(b), rows.Err()
		}
		out = append(out, m)
		last = cursor{Priority: m.Priority, At: qa.Time, Created: m.CreatedAt, ID: m.ID}
	}
	return out, "", rows.Err()
}

// rowWith scans the message columns and one more.
type rowWith struct {
	r     scanner
	extra any
}

func (r rowWith) Scan(dest ...any) error { return r.r.Scan(append(dest, r.extra)...) }

func (s *Store) Counts(ctx context.Context) (map[backends.Status]int, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT status, COUNT(*) FROM emails GROUP BY status")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[backends.Status]int{}
	for rows.Next() {
		var st backends.Status
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		out[st] = n
	}
	return out, rows.Err()
}

func (s *Store) Transition(ctx context.Context, t backends.Transition) error {
	if err := t.Check(); err != nil {
		return fmt.Errorf("message %s: %w", t.ID, err)
	}
	if t.At.IsZero() {
		t.At = time.Now().UTC()
	}
	if err := s.submit(ctx, &op{t: &t}); err != nil {
		return fmt.Errorf("message %s %s to %s: %w", t.ID, t.From, t.To, err)
	}
	return nil
}

// history gathers history rows, to write them in one statement.
type history struct {
	args []any
	n    int
}

func (h *history) add(id string, st backends.Status, reason string, at time.Time, details []byte) {
	h.args = append(h.args, id, st, null(reason), at.UTC(), nullBytes(details))
	h.n++
}

func (h *history) flush(ctx context.Context, tx *sql.Tx) error {
	if h.n == 0 {
		return nil
	}
	_, err := tx.ExecContext(ctx, "INSERT INTO email_statuses (email_id, status, reason, created_at, details) VALUES "+
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?), ", h.n), ", "), h.args...)
	h.args, h.n = h.args[:0], 0
	return err
}

// transition applies t inside tx: the conditional update, a history row per
// step (into h), and the event. A refusal (the message gone, or in another
// status) comes back as ErrNotFound or ErrLockNotAcquired and changes
// nothing.
func transition(ctx context.Context, tx *sql.Tx, t backends.Transition, h *history) error {
	final := t.Final()
	var results []byte
	if t.Results != nil {
		var err error
		if results, err = json.Marshal(t.Results); err != nil {
			return err
		}
	}
	var lease sql.NullTime
	if final.Working() {
		lease = nullTime(t.LeaseUntil)
	}
	add := 0
	if t.AddAttempt {
		add = 1
	}
	res, err := tx.ExecContext(ctx, `UPDATE emails SET status = ?, version = version + 1,
		reason = IF(?, reason, ?), updated_at = ?, lease_until = ?, due_at = COALESCE(?, due_at),
		attempts = attempts + ?, route = COALESCE(?, route), results = COALESCE(?, results),
		queue_at = CASE ? WHEN 'READY' THEN due_at WHEN 'ACCEPTED' THEN created_at ELSE ? END
		WHERE id = ? AND status = ?`,
		final, t.KeepReason, null(t.Reason), t.At.UTC(), lease, nullTime(t.DueAt),
		add, null(t.Route), nullBytes(results),
		final, t.At.UTC(), t.ID, t.From)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var st string
		if err := tx.QueryRowContext(ctx, "SELECT status FROM emails WHERE id = ?", t.ID).Scan(&st); errors.Is(err, sql.ErrNoRows) {
			return backends.ErrNotFound
		} else if err != nil {
			return err
		}
		return backends.ErrLockNotAcquired
	}
	h.add(t.ID, t.To, t.Reason, t.At, t.Details)
	for _, st := range t.Then {
		h.add(t.ID, st.To, st.Reason, t.At, nil)
	}
	if t.Event != nil {
		return insertEvent(ctx, tx, t.ID, t.Event, t.At)
	}
	return nil
}

func nullBytes(b []byte) sql.NullString { return sql.NullString{String: string(b), Valid: len(b) > 0} }

// refusal reports whether err is a transition's refusal rather than a
// failure of the database.
func refusal(err error) bool {
	return errors.Is(err, backends.ErrNotFound) || errors.Is(err, backends.ErrLockNotAcquired)
}

// inList makes "?, ?, ?" for n values.
func inList(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

func (s *Store) Claim(ctx context.Context, c backends.Claim) ([]*backends.Message, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Limit <= 0 {
		return nil, nil
	}
	var out []*backends.Message
	err := s.tx(ctx, func(tx *sql.Tx) error {
		out = nil
		query := "SELECT " + messageCols + " FROM emails WHERE status = ? AND queue_at <= ?"
		args := []any{c.From, c.Now.UTC()}
		if c.From == backends.StatusReady {
			codes, err := suspended(ctx, tx)
			if err != nil {
				return err
			}
			if len(codes) > 0 {
				query += " AND (batch_code IS NULL OR batch_code NOT IN (" + inList(len(codes)) + "))"
				for _, code := range codes {
					args = append(args, code)
				}
			}
		}
		query += " ORDER BY priority, queue_at, created_at, id LIMIT ? FOR UPDATE SKIP LOCKED"
		args = append(args, c.Limit)
		msgs, err := queryMessages(ctx, tx, query, args...)
		if err != nil || len(msgs) == 0 {
			return err
		}
		ids := make([]any, 0, len(msgs)+4)
		ids = append(ids, c.To, c.LeaseUntil.UTC(), c.Now.UTC(), c.Now.UTC())
		for _, m := range msgs {
			ids = append(ids, m.ID)
		}
		_, err = tx.ExecContext(ctx, `UPDATE emails SET status = ?, version = version + 1, lease_until = ?, updated_at = ?, queue_at = ?
			WHERE id IN (`+inList(len(msgs))+`)`, ids...)
		if err != nil {
			return err
		}
		var b strings.Builder
		b.WriteString("INSERT INTO email_statuses (email_id, status, reason, created_at) VALUES ")
		hist := make([]any, 0, 4*len(msgs))
		for i, m := range msgs {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?)")
			hist = append(hist, m.ID, c.To, null(c.Reason), c.Now.UTC())
			m.Status, m.Version, m.LeaseUntil, m.UpdatedAt = c.To, m.Version+1, c.LeaseUntil, c.Now
		}
		if _, err := tx.ExecContext(ctx, b.String(), hist...); err != nil {
			return err
		}
		out = msgs
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", c.From, err)
	}
	return out, nil
}

func suspended(ctx context.Context, q querier) ([]string, error) {
	rows, err := q.QueryContext(ctx, "SELECT code FROM email_batches ORDER BY code")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

func (s *Store) SuspendedBatches(ctx context.Context) ([]string, error) { return suspended(ctx, s.db) }

func (s *Store) SuspendBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	_, err := s.db.ExecContext(ctx, "INSERT IGNORE INTO email_batches (code, suspended_at) VALUES (?, ?)", code, time.Now().UTC())
	return err
}

func (s *Store) ActivateBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	_, err := s.db.ExecContext(ctx, "DELETE FROM email_batches WHERE code = ?", code)
	return err
}

const restoreChunk = 500

func workingStatuses() []any {
	var out []any
	for _, st := range backends.Statuses() {
		if st.Working() {
			out = append(out, st)
		}
	}
	return out
}

func (s *Store) Restore(ctx context.Context, expiredBefore time.Time) (int, error) {
	total := 0
	for {
		n := 0
		now := time.Now().UTC()
		err := s.tx(ctx, func(tx *sql.Tx) error {
			n = 0
			working := workingStatuses()
			msgs, err := queryMessages(ctx, tx, "SELECT "+messageCols+" FROM emails WHERE lease_until < ? AND status IN ("+
				inList(len(working))+") ORDER BY lease_until LIMIT ? FOR UPDATE SKIP LOCKED",
				append(append([]any{clamp(expiredBefore)}, working...), restoreChunk)...)
			if err != nil {
				return err
			}
			var h history
			for _, m := range msgs {
				prev := m.Status.Previous()
				err := transition(ctx, tx, backends.Transition{ID: m.ID, From: m.Status, To: prev, At: now, KeepReason: true,
					Reason: fmt.Sprintf("lease of %s expired at %s; returned to %s", m.Status, m.LeaseUntil.UTC().Format(time.RFC3339), prev)}, &h)
				if err != nil {
					return err
				}
			}
			if err := h.flush(ctx, tx); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `UPDATE email_events SET state = 'pending', lease_until = NULL, due_at = ?, updated_at = ?
				WHERE state = 'calling' AND lease_until < ? LIMIT ?`, now, now, clamp(expiredBefore), restoreChunk)
			if err != nil {
				return err
			}
			ne, _ := res.RowsAffected()
			n = len(msgs) + int(ne)
			return nil
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("restore: %w", err)
		}
		if n == 0 {
			return total, nil
		}
	}
}

// clamp keeps a time within what DATETIME holds.
func clamp(t time.Time) time.Time {
	if max := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC); t.After(max) {
		return max
	}
	return t.UTC()
}

func (s *Store) Purge(ctx context.Context, cutoff time.Time, limit int) ([]*backends.Message, error) {
	var out []*backends.Message
	err := s.tx(ctx, func(tx *sql.Tx) error {
		var acked []any
		for _, st := range backends.Statuses() {
			if st.Acknowledged() {
				acked = append(acked, st)
			}
		}
		msgs, err := queryMessages(ctx, tx, "SELECT "+messageCols+" FROM emails WHERE status IN ("+inList(len(acked))+
			") AND updated_at < ? ORDER BY updated_at LIMIT ? FOR UPDATE SKIP LOCKED", append(acked, cutoff.UTC(), limit)...)
		if err != nil || len(msgs) == 0 {
			out = nil
			return err
		}
		ids := make([]any, len(msgs))
		for i, m := range msgs {
			ids[i] = m.ID
		}
		// History and events go with the rows (ON DELETE CASCADE).
		if _, err := tx.ExecContext(ctx, "DELETE FROM emails WHERE id IN ("+inList(len(ids))+")", ids...); err != nil {
			return err
		}
		out = msgs
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("purge: %w", err)
	}
	return out, nil
}
