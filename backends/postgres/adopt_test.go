package postgres_test

import (
	"context"
	"testing"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/backends/backendtest"
	"github.com/genropy/postino/backends/postgres"
)

// TestAdoptSeedRows: after Migrate, every row the seed left in a status of
// its own is taken over or told, and Adopt says what it found and did.
func TestAdoptSeedRows(t *testing.T) {
	ctx := context.Background()
	dsn, pool := seedDatabase(t, backendtest.SeedAdoptionRows)
	if _, err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	backendtest.AdoptSeedRows(t, openDSN(t, dsn), func() (backends.Adoption, error) { return postgres.Adopt(ctx, pool) })
}
