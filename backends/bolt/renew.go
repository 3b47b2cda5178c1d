package bolt

import (
	"context"
	"encoding/json"
	"fmt"

	bbolt "go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
)

func (s *Store) Renew(ctx context.Context, r backends.Renewal) ([]string, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	var renewed []string
	err := s.write(ctx, func(tx *bbolt.Tx) error {
		renewed = renewed[:0]
		msgs, leases := tx.Bucket(bucketMessages), tx.Bucket(bucketLeases)
		for _, id := range r.IDs {
			v := msgs.Get([]byte(id))
			if v == nil {
				continue
			}
			m, err := decode(id, v)
			if err != nil {
				return err
			}
			if !r.Renews(m) {
				continue
			}
			if err := leases.Delete(timeIDKey(m.LeaseUntil, id)); err != nil {
				return err
			}
			m.LeaseUntil = r.Until
			if err := leases.Put(timeIDKey(m.LeaseUntil, id), nil); err != nil {
				return err
			}
			b, err := json.Marshal(m)
			if err != nil {
				return err
			}
			if err := msgs.Put([]byte(id), b); err != nil {
				return err
			}
			renewed = append(renewed, id)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("renew %d leases in %s: %w", len(r.IDs), r.Status, err)
	}
	return renewed, nil
}
