package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
	"github.com/genropy/postino/internal/groupcommit"
)

// op is one write of the group commit (sqlstore.Write), and what the
// store keeps beside it.
type op struct {
	sqlstore.Write
	prios []int // the priorities the claim found due
}

// commitConfig shapes the writer's groups: under load a group waits a
// millisecond for more (one commit, one WAL flush and one history insert
// for a whole group of sessions), and holds at most 256 writes.
var commitConfig = groupcommit.Config{Max: 256, Window: time.Millisecond}

// commit runs a group in one transaction (sqlstore.CommitGroup).
func (s *Store) commit(group []*op) []error {
	ctx := context.Background()
	return sqlstore.CommitGroup(group, func(g []*op) error {
		return s.tx(ctx, func(tx pgx.Tx) error { return s.apply(ctx, tx, g) })
	})
}

// apply writes a group inside tx (sqlstore.ApplyGroup), with a few
// statements whatever its size (txRows).
func (s *Store) apply(ctx context.Context, tx pgx.Tx, group []*op) error {
	w := newTxRows(ctx, tx, s.sender)
	insert := func(creates []*op) error { return s.insertMessages(w, creates) }
	if err := sqlstore.ApplyGroup(w, group, insert, w.lockClaims); err != nil {
		return err
	}
	return w.Write()
}

// insertMessages creates messages with one statement, and their bodies
// when the store keeps them. An id already taken keeps its row (ON
// CONFLICT DO NOTHING); the ids the insert returns are the rows this group
// made, each the first create of its id.
func (s *Store) insertMessages(w *txRows, creates []*op) error {
	if len(creates) == 0 {
		return nil
	}
	var (
		ids, statuses                                        []string
		eml, payload, reason, msgid, batch, route, envelopes []*string
		priority                                             []int
		created, updated, due, queued                        []time.Time
	)
	for _, o := range creates {
		m := o.Create
		env, err := json.Marshal(m.Envelope)
		if err != nil {
			return err
		}
		ids, statuses, eml, payload = append(ids, m.ID), append(statuses, string(m.Status)), append(eml, null(m.EmlPath)), append(payload, null(m.PayloadPath))
		reason, created, updated = append(reason, null(m.Reason)), append(created, ts(m.CreatedAt)), append(updated, ts(m.UpdatedAt))
		msgid, priority, batch, due = append(msgid, null(m.MessageID)), append(priority, m.Priority), append(batch, null(m.Batch)), append(due, ts(m.DueAt))
		queued, route, envelopes = append(queued, ts(m.QueueTime())), append(route, null(m.Route)), append(envelopes, nullBytes(env))
	}
	rows, err := w.tx.Query(w.ctx, `INSERT INTO emails (id, status, eml_file_path, payload_file_path, reason, version,
		created_at, updated_at, message_id, priority, batch_code, due_at, queue_at, attempts, route, envelope)
		SELECT id, status, eml, payload, reason, 1, created_at, updated_at, message_id, priority, batch_code, due_at, queue_at, 0, route, envelope
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[], $8::text[],
			$9::smallint[], $10::text[], $11::timestamptz[], $12::timestamptz[], $13::text[], $14::text[])
			AS n(id, status, eml, payload, reason, created_at, updated_at, message_id, priority, batch_code, due_at, queue_at, route, envelope)
		ON CONFLICT (id) DO NOTHING RETURNING id`,
		ids, statuses, eml, payload, reason, created, updated, msgid, priority, batch, due, queued, route, envelopes)
	if err != nil {
		return err
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	made := map[string]bool{}
	for _, id := range inserted {
		made[id] = true
	}
	batched := map[string][]string{}
	var bodies []*backends.Message
	for _, o := range creates {
		m := o.Create
		// Two creates of one id in one group: the first is the row.
		if !made[m.ID] {
			o.Err = backends.ErrDuplicate
			continue
		}
		delete(made, m.ID)
		if m.Body != nil {
			bodies = append(bodies, m)
		}
		w.Changes.Created(m)
		// No notification: the relay that creates a message prepares it
		// (intake.Worker.Accepted), and another that woke would only race
		// it for the message. A relay that dies first leaves it to the
		// others' polls.
		if m.Batch != "" {
			batched[m.Batch] = append(batched[m.Batch], m.ID)
		}
	}
	// The bytes commit with their row, or not at all: only the rows this
	// group made get them.
	if err := s.insertBodies(w.ctx, w.tx, bodies); err != nil {
		return err
	}
	return holdSuspended(w.ctx, w.tx, batched)
}
