package mysql_test

import (
	"context"
	"testing"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/mysql"
)

// TestAdoptSeedRows: after Migrate, every row the seed left in a status of
// its own is taken over or told, and Adopt says what it found and did.
func TestAdoptSeedRows(t *testing.T) {
	ctx := context.Background()
	dsn, db := seedDatabase(t)
	if _, err := db.Exec(backendtest.SeedAdoptionRows); err != nil {
		t.Fatal(err)
	}
	if _, err := mysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	backendtest.AdoptSeedRows(t, openDSN(t, dsn), func() (backends.Adoption, error) { return mysql.Adopt(ctx, db) })
}
