package mysql

import (
	"context"
	"database/sql"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/internal/sqlstore"
)

// Adopt takes over the rows an outbox of the seed layout left (after
// Migrate), so that none waits for ever unseen: a row on its way goes back
// to ACCEPTED, where intake reads its envelope from its files (absolute
// spool paths are honoured); one whose outcome no plugin was told of gets
// the event that tells it; one that names no message file becomes INVALID,
// told too (sqlstore.AdoptSeed). It can run again: what it did is not done
// twice.
func Adopt(ctx context.Context, db *sql.DB) (backends.Adoption, error) {
	return sqlstore.AdoptSeed(ctx, sqlDB{db}, seedAdopter{ctx, db})
}

// seedAdopter is the sqlstore.SeedAdopter of a database.
type seedAdopter struct {
	ctx context.Context
	db  *sql.DB
}

func (s seedAdopter) SeedPage(where, after string) ([]string, error) {
	return queryIDs(s.ctx, s.db, stmt{Query: "SELECT id FROM emails WHERE envelope IS NULL AND " + where +
		" AND id > ? ORDER BY id LIMIT ?", Args: []any{after, sqlstore.SeedPageSize}})
}

// InTx runs fn in a transaction of its own, not again after a deadlock.
func (s seedAdopter) InTx(fn func(sqlstore.Tx) error) error {
	tx, err := begin(s.ctx, s.db)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(newTxRows(s.ctx, tx)); err != nil {
		return err
	}
	return tx.Commit()
}
