package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
)

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
func Adopt(ctx context.Context, db *sql.DB) (backends.Adoption, error) {
	a := backends.Adoption{Found: map[backends.Status]int{}}
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
func adoptAll(ctx context.Context, db *sql.DB, where string, a *backends.Adoption) error {
	after := ""
	for {
		rows, err := db.QueryContext(ctx, "SELECT id FROM emails WHERE envelope IS NULL AND "+where+
			" AND id > ? ORDER BY id LIMIT ?", after, adoptPage)
		if err != nil {
			return err
		}
		ids, err := scanIDs(rows)
		if err != nil || len(ids) == 0 {
			return err
		}
		after = ids[len(ids)-1]
		if err := adoptPageOf(ctx, db, ids, a); err != nil {
			return err
		}
	}
}

func adoptPageOf(ctx context.Context, db *sql.DB, ids []string, a *backends.Adoption) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	w := newTxRows(ctx, tx)
	done, err := backends.AdoptHeld(w, ids, time.Now().UTC()) // counted once the page commits
	if err != nil {
		return err
	}
	if err := w.write(); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	for _, k := range done {
		a.Count(k)
	}
	return nil
}
