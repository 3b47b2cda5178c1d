package bolt

import (
	"context"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
)

var (
	bucketLinks    = []byte("links")    // key -> message id
	bucketMsgLinks = []byte("msglinks") // message id 0x00 key -> nil, to remove them with the message
)

func (s *Store) Link(ctx context.Context, key, messageID string) error {
	if err := backends.CheckLinkKey(key); err != nil {
		return err
	}
	return s.db.Update(func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketMessages).Get([]byte(messageID)) == nil {
			return fmt.Errorf("link %s to %s: %w", key, messageID, backends.ErrNotFound)
		}
		links := tx.Bucket(bucketLinks)
		if links.Get([]byte(key)) != nil {
			return nil
		}
		if err := links.Put([]byte(key), []byte(messageID)); err != nil {
			return err
		}
		return tx.Bucket(bucketMsgLinks).Put(pairKey(messageID, key), nil)
	})
}

func (s *Store) Linked(ctx context.Context, key string) (string, error) {
	var id string
	err := s.db.View(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bucketLinks).Get([]byte(key))
		if v == nil {
			return fmt.Errorf("link %s: %w", key, backends.ErrNotFound)
		}
		id = string(v)
		return nil
	})
	return id, err
}

// removeLinks deletes the links of a removed message.
func removeLinks(tx *bbolt.Tx, id string) error {
	prefix := pairKey(id, "")
	ml := tx.Bucket(bucketMsgLinks)
	for _, k := range keysUnder(ml, prefix) {
		if err := tx.Bucket(bucketLinks).Delete(k[len(prefix):]); err != nil {
			return err
		}
		if err := ml.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
