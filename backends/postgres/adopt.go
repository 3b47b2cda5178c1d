package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// Adopt takes over the rows an outbox of the seed layout left (after
// Migrate), as the MySQL store's Adopt does (sqlstore.AdoptSeed): a row
// on its way goes back to ACCEPTED, one whose outcome no plugin was told
// of gets the event that tells it, one that names no message file becomes
// INVALID, told too. It can run again: what it did is not done twice. Its
// notifications name no store, so that every relay listening wakes.
func Adopt(ctx context.Context, pool *pgxpool.Pool) (backends.Adoption, error) {
	return sqlstore.AdoptSeed(ctx, pgDB{pool}, seedAdopter{ctx, pool})
}

// seedAdopter is the sqlstore.SeedAdopter of a database.
type seedAdopter struct {
	ctx  context.Context
	pool *pgxpool.Pool
}

func (s seedAdopter) SeedPage(where, after string) ([]string, error) {
	rows, err := s.pool.Query(s.ctx, "SELECT id FROM emails WHERE envelope IS NULL AND "+where+
		" AND id > $1 ORDER BY id LIMIT $2", after, sqlstore.SeedPageSize)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// InTx runs fn in a transaction of its own, not again after a deadlock.
func (s seedAdopter) InTx(fn func(sqlstore.Tx) error) error {
	return pgx.BeginFunc(s.ctx, s.pool, func(tx pgx.Tx) error { return fn(newTxRows(s.ctx, tx, "")) })
}
