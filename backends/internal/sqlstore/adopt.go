package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
)

// A seed row is one with no envelope: the seed kept the envelope in a
// payload file, Postino keeps it in the row from the SMTP transaction on.
// AdoptSeed takes over those on their way, then those whose outcome no
// plugin was told of.
const (
	seedInFlight = "status IN ('ACCEPTED','INTAKING','READY','PROCESSING')"
	seedUntold   = `status IN ('SENT','FAILED','INVALID','CALLING-SENT-CALLBACK','CALLING-FAILED-CALLBACK','CALLING-INVALID-CALLBACK')
		AND NOT EXISTS (SELECT 1 FROM email_events e WHERE e.email_id = emails.id)`
)

// SeedPageSize bounds one adoption transaction.
const SeedPageSize = 500

// SeedAdopter is what AdoptSeed needs of a SQL store.
type SeedAdopter interface {
	// SeedPage returns the ids, in order, of up to a page of the seed's
	// rows that the store's condition where selects, past the id after.
	SeedPage(where, after string) ([]string, error)
	// InTx runs fn in a transaction of its own, which it commits unless
	// fn fails.
	InTx(fn func(Tx) error) error
}

// AdoptSeed is a SQL store's Adopt: it counts in db what the seed left,
// then pages by id through the seed's rows on their way, then through
// those whose outcome no plugin was told of, a transaction a page,
// counting what each page did once it commits.
func AdoptSeed(ctx context.Context, db DB, s SeedAdopter) (backends.Adoption, error) {
	var a backends.Adoption
	found, err := counts(ctx, db, Stmt{Query: "SELECT status, COUNT(*) FROM emails WHERE envelope IS NULL GROUP BY status"})
	if err != nil {
		return a, fmt.Errorf("adopt the seed's rows: %w", err)
	}
	a.Found = found
	for _, where := range []string{seedInFlight, seedUntold} {
		if err := adoptAll(s, where, &a); err != nil {
			return a, fmt.Errorf("adopt the seed's rows: %w", err)
		}
	}
	return a, nil
}

// adoptAll pages through the seed rows that where selects, by id.
func adoptAll(s SeedAdopter, where string, a *backends.Adoption) error {
	for after := ""; ; {
		ids, err := s.SeedPage(where, after)
		if err != nil || len(ids) == 0 {
			return err
		}
		var done []backends.Adopted
		err = s.InTx(func(tx Tx) error {
			var err error
			if done, err = AdoptHeld(tx, ids, time.Now().UTC()); err != nil {
				return err
			}
			return tx.Write()
		})
		if err != nil {
			return err
		}
		for _, k := range done {
			a.Count(k)
		}
		after = ids[len(ids)-1]
	}
}
