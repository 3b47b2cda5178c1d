package bolt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
)

// upgrade brings the file's layout to schemaVersion, in the transaction
// that opens it, so that a file is never seen half upgraded.
func upgrade(tx *bbolt.Tx) error {
	meta := tx.Bucket(bucketMeta)
	v := meta.Get([]byte("schema"))
	if v == nil { // a new file
		return meta.Put([]byte("schema"), u64(schemaVersion))
	}
	got := binary.BigEndian.Uint64(v)
	if got > schemaVersion {
		return fmt.Errorf("outbox schema version %d is newer than this postino understands (%d); run a newer postino", got, schemaVersion)
	}
	if got < 2 {
		if err := upgradeTo2(tx); err != nil {
			return fmt.Errorf("upgrade the outbox to schema 2: %w", err)
		}
	}
	return meta.Put([]byte("schema"), u64(schemaVersion))
}

// upgradeTo2: the event queue holds only the events first in line for
// their message (claims read only what they may take), and the PEC
// messages still owed receipts get the alarm the overdue check now goes by.
func upgradeTo2(tx *bbolt.Tx) error {
	var waiting [][]byte
	c := tx.Bucket(bucketEvQueue).Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		e, err := getEvent(tx, timeIDKeyID(k))
		if err != nil {
			return err
		}
		h, err := headEvent(tx, e.MessageID)
		if err != nil {
			return err
		}
		if h == nil || h.ID != e.ID {
			waiting = append(waiting, bytes.Clone(k))
		}
	}
	for _, k := range waiting {
		if err := tx.Bucket(bucketEvQueue).Delete(k); err != nil {
			return err
		}
	}
	now := time.Now().UTC()
	return tx.Bucket(bucketMessages).ForEach(func(k, v []byte) error {
		m, err := decode(string(k), v)
		if err != nil || !backends.AwaitsPECReceipts(m) {
			return err
		}
		return setAlarm(tx, backends.Alarm{Kind: backends.AlarmPECReceipts, MessageID: m.ID, At: now})
	})
}
