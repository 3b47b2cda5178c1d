package mysql

import (
	"context"
	"database/sql"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
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
	return sqlstore.AdoptSeed(seedAdopter{ctx, db}, seedInFlight, seedUntold)
}

// seedAdopter is the sqlstore.SeedAdopter of a database.
type seedAdopter struct {
	ctx context.Context
	db  *sql.DB
}

func (s seedAdopter) FoundSeed() (map[backends.Status]int, error) {
	rows, err := s.db.QueryContext(s.ctx, "SELECT status, COUNT(*) FROM emails WHERE envelope IS NULL GROUP BY status")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	found := map[backends.Status]int{}
	for rows.Next() {
		var st backends.Status
		var n int
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		found[st] = n
	}
	return found, rows.Err()
}

func (s seedAdopter) SeedPage(where, after string) ([]string, error) {
	rows, err := s.db.QueryContext(s.ctx, "SELECT id FROM emails WHERE envelope IS NULL AND "+where+
		" AND id > ? ORDER BY id LIMIT ?", after, adoptPage)
	if err != nil {
		return nil, err
	}
	return scanIDs(rows)
}

func (s seedAdopter) AdoptPage(ids []string) ([]backends.Adopted, error) {
	tx, err := begin(s.ctx, s.db)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	w := newTxRows(s.ctx, tx)
	done, err := sqlstore.AdoptHeld(w, ids, time.Now().UTC())
	if err != nil {
		return nil, err
	}
	if err := w.write(); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	return done, nil
}
