package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
)

// op is one write waiting for the writer: a create or a transition.
type op struct {
	create *backends.Message
	t      *backends.Transition
	err    error
	done   chan struct{}
}

const (
	maxGroup    = 256
	groupWindow = time.Millisecond
)

var errStoreClosed = errors.New("outbox is closed")

// submit hands a write to the writer and waits for its commit.
func (s *Store) submit(ctx context.Context, o *op) error {
	o.done = make(chan struct{})
	select {
	case s.ops <- o:
	case <-s.quit:
		return errStoreClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	<-o.done
	return o.err
}

// writer runs the writes that wait in groups; under load it lingers a moment
// for more, as a group of sessions comes at once.
func (s *Store) writer() {
	defer close(s.done)
	timer := time.NewTimer(0)
	<-timer.C
	last := 0
	for {
		var group []*op
		select {
		case <-s.quit:
			return
		case o := <-s.ops:
			group = append(group, o)
		}
		window := groupWindow
		if last <= 1 {
			window = 0
		}
		timer.Reset(window)
	gather:
		for len(group) < maxGroup {
			select {
			case o := <-s.ops:
				group = append(group, o)
			case <-timer.C:
				break gather
			}
		}
		if !timer.Stop() && len(group) == maxGroup {
			<-timer.C
		}
		last = len(group)
		s.run(group)
	}
}

// run commits a group in one transaction. When the database fails it, each
// write runs again alone, so that one bad write fails only itself.
func (s *Store) run(group []*op) {
	ctx := context.Background()
	err := s.tx(ctx, func(tx *sql.Tx) error { return s.apply(ctx, tx, group) })
	if err != nil && len(group) > 1 {
		for _, o := range group {
			o.err = s.tx(ctx, func(tx *sql.Tx) error { return s.apply(ctx, tx, []*op{o}) })
			close(o.done)
		}
		return
	}
	for _, o := range group {
		if err != nil {
			o.err = err
		}
		close(o.done)
	}
}

// apply writes a group inside tx. Refusals (a duplicate id, a message not in
// the expected status) are each write's own result and do not fail the
// transaction.
func (s *Store) apply(ctx context.Context, tx *sql.Tx, group []*op) error {
	var h history
	var creates []*op
	for _, o := range group {
		o.err = nil
		if o.create != nil {
			creates = append(creates, o)
		}
	}
	if err := s.insertMessages(ctx, tx, creates, &h); err != nil {
		return err
	}
	for _, o := range group {
		if o.t == nil {
			continue
		}
		if err := transition(ctx, tx, *o.t, &h); err != nil {
			if !refusal(err) {
				return err
			}
			o.err = err
		}
	}
	return h.flush(ctx, tx)
}

// insertMessages creates messages with one statement. An id already taken
// keeps its row (ON DUPLICATE KEY changes nothing); reading the spool paths
// back tells which rows are ours, since each submission has its own file.
func (s *Store) insertMessages(ctx context.Context, tx *sql.Tx, creates []*op, h *history) error {
	if len(creates) == 0 {
		return nil
	}
	args := make([]any, 0, 14*len(creates))
	ids := make([]any, 0, len(creates))
	for _, o := range creates {
		m := o.create
		env, err := json.Marshal(m.Envelope)
		if err != nil {
			return err
		}
		args = append(args, m.ID, m.Status, null(m.EmlPath), null(m.PayloadPath), null(m.Reason), m.CreatedAt.UTC(), m.UpdatedAt.UTC(),
			null(m.MessageID), m.Priority, null(m.Batch), m.DueAt.UTC(), m.CreatedAt.UTC(), null(m.Route), env)
		ids = append(ids, m.ID)
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO emails (id, status, eml_file_path, payload_file_path, reason, version,
		created_at, updated_at, message_id, priority, batch_code, due_at, queue_at, attempts, route, envelope) VALUES `+
		strings.TrimSuffix(strings.Repeat("(?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?), ", len(creates)), ", ")+
		" ON DUPLICATE KEY UPDATE id = id", args...)
	if err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, "SELECT id, eml_file_path FROM emails WHERE id IN ("+inList(len(ids))+")", ids...)
	if err != nil {
		return err
	}
	paths := map[string]string{}
	for rows.Next() {
		var id string
		var path sql.NullString
		if err := rows.Scan(&id, &path); err != nil {
			rows.Close()
			return err
		}
		paths[strings.TrimRight(id, " ")] = path.String
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	mine := map[string]bool{}
	for _, o := range creates {
		m := o.create
		// Two creates of one id in one group: the first is the row.
		if paths[m.ID] != m.EmlPath || mine[m.ID] {
			o.err = backends.ErrDuplicate
			continue
		}
		mine[m.ID] = true
		h.add(m.ID, m.Status, m.Reason, m.CreatedAt, nil)
	}
	return nil
}
