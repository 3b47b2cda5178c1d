package bolt

import (
	"context"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
)

func (s *Store) SuspendBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	return s.db.Update(func(tx *bbolt.Tx) error {
		if err := tx.Bucket(bucketBatches).Put([]byte(code), u64(uint64(time.Now().UnixNano()))); err != nil {
			return err
		}
		return moveBatch(tx, code, bucketQueue, bucketHeld)
	})
}

func (s *Store) ActivateBatch(ctx context.Context, code string) error {
	if err := backends.CheckBatch(code); err != nil {
		return err
	}
	return s.db.Update(func(tx *bbolt.Tx) error {
		if err := tx.Bucket(bucketBatches).Delete([]byte(code)); err != nil {
			return err
		}
		return moveBatch(tx, code, bucketHeld, bucketQueue)
	})
}

// moveBatch moves the queue keys of the batch's READY messages between the
// claimable queue and the held set.
func moveBatch(tx *bbolt.Tx, code string, from, to []byte) error {
	for _, id := range suffixesUnder(tx.Bucket(bucketBatchMsgs), pairKey(code, "")) {
		m, err := get(tx, id)
		if err != nil {
			return err
		}
		if m.Status != backends.StatusReady {
			continue
		}
		k := queueKey(m)
		if err := tx.Bucket(from).Delete(k); err != nil {
			return err
		}
		if err := tx.Bucket(to).Put(k, nil); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) SuspendedBatches(ctx context.Context) ([]string, error) {
	var out []string
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketBatches).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}
