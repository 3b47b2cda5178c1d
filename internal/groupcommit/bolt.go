package groupcommit

import bbolt "go.etcd.io/bbolt"

// BoltUpdates commits a group of writes to db in one transaction: one fsync
// for all of them. When the transaction fails, each write runs again alone,
// so that one write's failure does not fail the others; a write may
// therefore run twice.
func BoltUpdates(db *bbolt.DB) func(group []func(*bbolt.Tx) error) []error {
	return func(group []func(*bbolt.Tx) error) []error {
		err := db.Update(func(tx *bbolt.Tx) error {
			for _, fn := range group {
				if err := fn(tx); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil {
			return nil
		}
		errs := make([]error, len(group))
		for i, fn := range group {
			errs[i] = db.Update(fn)
		}
		return errs
	}
}
