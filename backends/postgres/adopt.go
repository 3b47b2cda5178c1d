package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
// Migrate), as the MySQL store's Adopt does (backends.SeedAdoption): a row
// on its way goes back to ACCEPTED, one whose outcome no plugin was told
// of gets the event that tells it, one that names no message file becomes
// INVALID, told too. It can run again: what it did is not done twice. Its
// notifications name no store, so that every relay listening wakes.
func Adopt(ctx context.Context, pool *pgxpool.Pool) (backends.Adoption, error) {
	a := backends.Adoption{Found: map[backends.Status]int{}}
	rows, err := pool.Query(ctx, "SELECT status, COUNT(*) FROM emails WHERE envelope IS NULL GROUP BY status")
	if err != nil {
		return a, fmt.Errorf("adopt the seed's rows: %w", err)
	}
	var st backends.Status
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		a.Found[st] = int(n)
		return nil
	})
	if err != nil {
		return a, fmt.Errorf("adopt the seed's rows: %w", err)
	}
	for _, where := range []string{seedInFlight, seedUntold} {
		if err := adoptAll(ctx, pool, where, &a); err != nil {
			return a, fmt.Errorf("adopt the seed's rows: %w", err)
		}
	}
	return a, nil
}

// adoptAll pages through the seed rows that where selects, by id.
func adoptAll(ctx context.Context, pool *pgxpool.Pool, where string, a *backends.Adoption) error {
	after := ""
	for {
		rows, err := pool.Query(ctx, "SELECT id FROM emails WHERE envelope IS NULL AND "+where+
			" AND id > $1 ORDER BY id LIMIT $2", after, adoptPage)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(ids) == 0 {
			return err
		}
		after = ids[len(ids)-1]
		var done []backends.Adopted // counted once the page commits
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			done = nil
			return adoptPageOf(ctx, tx, ids, &done)
		})
		if err != nil {
			return err
		}
		for _, k := range done {
			a.Count(k)
		}
	}
}

func adoptPageOf(ctx context.Context, tx pgx.Tx, ids []string, done *[]backends.Adopted) error {
	w := newTxRows(ctx, tx, "")
	var err error
	if *done, err = backends.AdoptHeld(w, ids, time.Now().UTC()); err != nil {
		return err
	}
	return w.write()
}
