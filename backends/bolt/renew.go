package bolt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
)

func (s *Store) Renew(ctx context.Context, r backends.Renewal) ([]string, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	renewed, err := s.renewEach(ctx, r.IDs, func(tx *bbolt.Tx, id string) (bool, error) {
		m, err := get(tx, id)
		if errors.Is(err, backends.ErrNotFound) || err == nil && !r.Renews(m) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return true, renewMessage(tx, m, r.Until)
	})
	if err != nil {
		return nil, fmt.Errorf("renew %d leases in %s: %w", len(r.IDs), r.Status, err)
	}
	return renewed, nil
}

// renewEach renews each of ids with renew, which says whether it did, in
// one write transaction, and returns those renewed.
func (s *Store) renewEach(ctx context.Context, ids []string, renew func(tx *bbolt.Tx, id string) (bool, error)) ([]string, error) {
	var renewed []string
	err := s.write(ctx, func(tx *bbolt.Tx) error {
		renewed = renewed[:0]
		for _, id := range ids {
			ok, err := renew(tx, id)
			if err != nil {
				return err
			}
			if ok {
				renewed = append(renewed, id)
			}
		}
		return nil
	})
	return renewed, err
}

// renewMessage moves m's lease, and its entry in the leases bucket, to
// until.
func renewMessage(tx *bbolt.Tx, m *backends.Message, until time.Time) error {
	leases := tx.Bucket(bucketLeases)
	if err := leases.Delete(timeIDKey(m.LeaseUntil, m.ID)); err != nil {
		return err
	}
	m.LeaseUntil = until
	if err := leases.Put(timeIDKey(m.LeaseUntil, m.ID), nil); err != nil {
		return err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketMessages).Put([]byte(m.ID), b)
}

func (s *Store) RenewEvents(ctx context.Context, r backends.EventRenewal) ([]string, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	renewed, err := s.renewEach(ctx, r.IDs, func(tx *bbolt.Tx, id string) (bool, error) { return renewEvent(tx, r, id) })
	if err != nil {
		return nil, fmt.Errorf("renew the leases of %d calling events: %w", len(r.IDs), err)
	}
	return renewed, nil
}

// renewEvent renews the event id, and its message, as r says; false when
// r does not renew it.
func renewEvent(tx *bbolt.Tx, r backends.EventRenewal, id string) (bool, error) {
	e, err := getEvent(tx, id)
	if errors.Is(err, backends.ErrNotFound) || err == nil && !r.Renews(e) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	after := *e
	after.LeaseUntil = r.Until
	if err := (&eventTx{tx: tx}).PutEvent(e, &after); err != nil {
		return false, err
	}
	m, err := get(tx, e.MessageID)
	if err != nil {
		return false, err
	}
	if r.RenewsMessage(e, m) {
		return true, renewMessage(tx, m, r.Until)
	}
	return true, nil
}
