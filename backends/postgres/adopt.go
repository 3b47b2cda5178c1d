package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
// Migrate), as the MySQL store's Adopt does (backends.SeedAdoption): a row
// on its way goes back to ACCEPTED, one whose outcome no plugin was told
// of gets the event that tells it, one that names no message file becomes
// INVALID, told too. It can run again: what it did is not done twice. Its
// notifications name no store, so that every relay listening wakes.
func Adopt(ctx context.Context, pool *pgxpool.Pool) (backends.Adoption, error) {
	return sqlstore.AdoptSeed(seedAdopter{ctx, pool}, seedInFlight, seedUntold)
}

// seedAdopter is the sqlstore.SeedAdopter of a database.
type seedAdopter struct {
	ctx  context.Context
	pool *pgxpool.Pool
}

func (s seedAdopter) FoundSeed() (map[backends.Status]int, error) {
	rows, err := s.pool.Query(s.ctx, "SELECT status, COUNT(*) FROM emails WHERE envelope IS NULL GROUP BY status")
	if err != nil {
		return nil, err
	}
	found := map[backends.Status]int{}
	var st backends.Status
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&st, &n}, func() error {
		found[st] = int(n)
		return nil
	})
	return found, err
}

func (s seedAdopter) SeedPage(where, after string) ([]string, error) {
	rows, err := s.pool.Query(s.ctx, "SELECT id FROM emails WHERE envelope IS NULL AND "+where+
		" AND id > $1 ORDER BY id LIMIT $2", after, adoptPage)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func (s seedAdopter) AdoptPage(ids []string) ([]backends.Adopted, error) {
	var done []backends.Adopted
	err := pgx.BeginFunc(s.ctx, s.pool, func(tx pgx.Tx) error {
		w := newTxRows(s.ctx, tx, "")
		var err error
		if done, err = sqlstore.AdoptHeld(w, ids, time.Now().UTC()); err != nil {
			return err
		}
		return w.write()
	})
	if err != nil {
		return nil, err
	}
	return done, nil
}
