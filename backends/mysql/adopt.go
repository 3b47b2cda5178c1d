package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
)

// Adoption is what Adopt found among the rows of the seed layout and did
// with them.
type Adoption struct {
	// Found counts the seed's rows by status, as Adopt found them.
	Found map[backends.Status]int
	// Queued rows were on their way: they are ACCEPTED now, and intake
	// gives each the envelope its payload file or its headers say.
	Queued int
	// Told rows had an outcome no plugin was told of: an event tells it.
	Told int
	// Unsendable rows name no message file: INVALID, and the plugins told.
	Unsendable int
}

// adoptPage bounds one adoption transaction.
const adoptPage = 500

// A seed row is one with no envelope: the seed kept the envelope in a
// payload file, Postino keeps it in the row from the SMTP transaction on.
const (
	seedInFlight = "status IN ('ACCEPTED','INTAKING','READY','PROCESSING')"
	seedUntold   = `status IN ('SENT','FAILED','INVALID','CALLING-SENT-CALLBACK','CALLING-FAILED-CALLBACK','CALLING-INVALID-CALLBACK')
		AND NOT EXISTS (SELECT 1 FROM email_events e WHERE e.email_id = emails.id)`
)

// Adopt takes over the rows an outbox of the seed layout left (after
// Migrate), so that none waits for ever unseen: a row on its way goes back
// to ACCEPTED, where intake reads its envelope from its files (absolute
// spool paths are honoured); one whose outcome no plugin was told of gets
// the event that tells it; one that names no message file becomes INVALID,
// told too. It can run again: what it did is not done twice.
func Adopt(ctx context.Context, db *sql.DB) (Adoption, error) {
	a := Adoption{Found: map[backends.Status]int{}}
	rows, err := db.QueryContext(ctx, "SELECT status, COUNT(*) FROM emails WHERE envelope IS NULL GROUP BY status")
	if err != nil {
		return a, fmt.Errorf("adopt the seed's rows: %w", err)
	}
	for rows.Next() {
		var st backends.Status
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			rows.Close()
			return a, err
		}
		a.Found[st] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return a, err
	}
	for _, where := range []string{seedInFlight, seedUntold} {
		if err := adoptAll(ctx, db, where, &a); err != nil {
			return a, fmt.Errorf("adopt the seed's rows: %w", err)
		}
	}
	return a, nil
}

// adoptAll pages through the seed rows that where selects, by id.
func adoptAll(ctx context.Context, db *sql.DB, where string, a *Adoption) error {
	after := ""
	for {
		var ids []string
		rows, err := db.QueryContext(ctx, "SELECT id FROM emails WHERE envelope IS NULL AND "+where+
			" AND id > ? ORDER BY id LIMIT ?", after, adoptPage)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			ids = append(ids, strings.TrimRight(id, " "))
		}
		rows.Close()
		if err := rows.Err(); err != nil || len(ids) == 0 {
			return err
		}
		after = ids[len(ids)-1]
		if err := adoptPageOf(ctx, db, ids, a); err != nil {
			return err
		}
	}
}

func adoptPageOf(ctx context.Context, db *sql.DB, ids []string, a *Adoption) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	w := newTxRows(ctx, tx)
	if err := w.lockMessages(ids); err != nil {
		return err
	}
	var queued, told, unsendable int
	now := time.Now().UTC()
	for _, id := range ids {
		m, ok := w.msgs[id]
		if !ok || m.Envelope.Recipients != nil {
			continue // gone, or taken meanwhile
		}
		t, kind := adoption(m, now)
		if t == nil {
			queued++ // ACCEPTED already: intake takes it as it is
			continue
		}
		if err := w.Move(*t); err != nil {
			return fmt.Errorf("message %s: %w", id, err)
		}
		switch kind {
		case "queued":
			queued++
		case "told":
			told++
		default:
			unsendable++
		}
	}
	if err := w.write(); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	a.Queued, a.Told, a.Unsendable = a.Queued+queued, a.Told+told, a.Unsendable+unsendable
	return nil
}

// adoption is the move that takes a seed row over, and what kind it is; nil
// when the row needs none.
func adoption(m *backends.Message, now time.Time) (*backends.Transition, string) {
	from := m.Status
	t := &backends.Transition{ID: m.ID, From: from, At: now}
	switch {
	case from.Undelivered() && m.EmlPath == "":
		t.To = backends.StatusInvalid
		t.Reason = fmt.Sprintf("taken over from the seed layout (was %s) with no message file (eml_file_path): send it again from the app", from)
		t.Event = backends.OutcomeEvent(from, t.To, t.Reason, seedDetails())
		return t, "unsendable"
	case from == backends.StatusAccepted:
		return nil, "queued"
	case from.Undelivered():
		t.To = backends.StatusAccepted
		t.Reason = fmt.Sprintf("taken over from the seed layout (was %s): intake reads its envelope from its payload file or its headers", from)
		return t, "queued"
	}
	// An outcome, or the seed's callback of one under way: the plugins are
	// told it as Postino tells its own.
	t.To = from
	if from.Working() {
		t.To = from.Previous()
	}
	t.Reason = fmt.Sprintf("taken over from the seed layout (was %s): its outcome is told to the plugins", from)
	t.Event = backends.OutcomeEvent(from, t.To, m.Reason, seedDetails())
	return t, "told"
}

// seedDetails marks the events of rows taken over from the seed layout.
func seedDetails() map[string]any { return map[string]any{"taken_over_from": "seed layout"} }
