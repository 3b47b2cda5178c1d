package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
)

// Alarm buckets: one orders each kind's alarms by the time they ring, the
// other finds a message's alarms, to move or remove them.
var (
	bucketAlarms    = []byte("alarms")    // kind 0x00 time, id -> nil
	bucketMsgAlarms = []byte("msgalarms") // id 0x00 kind -> time
)

func alarmKey(kind string, at time.Time, id string) []byte {
	return append(pairKey(kind, ""), timeIDKey(at, id)...)
}

// setAlarm sets or moves a message's alarm.
func setAlarm(tx *bbolt.Tx, a backends.Alarm) error {
	if err := clearAlarm(tx, a.Kind, a.MessageID); err != nil {
		return err
	}
	if err := tx.Bucket(bucketAlarms).Put(alarmKey(a.Kind, a.At, a.MessageID), nil); err != nil {
		return err
	}
	return tx.Bucket(bucketMsgAlarms).Put(pairKey(a.MessageID, a.Kind), u64(unixNano(a.At)))
}

func clearAlarm(tx *bbolt.Tx, kind, id string) error {
	ma := tx.Bucket(bucketMsgAlarms)
	v := ma.Get(pairKey(id, kind))
	if v == nil {
		return nil
	}
	at := time.Unix(0, int64(binary.BigEndian.Uint64(v)))
	if err := tx.Bucket(bucketAlarms).Delete(alarmKey(kind, at, id)); err != nil {
		return err
	}
	return ma.Delete(pairKey(id, kind))
}

// removeAlarms deletes the alarms of a removed message.
func removeAlarms(tx *bbolt.Tx, id string) error {
	for _, kind := range suffixesUnder(tx.Bucket(bucketMsgAlarms), pairKey(id, "")) {
		if err := clearAlarm(tx, kind, id); err != nil {
			return err
		}
	}
	return nil
}

func (s *Store) SetAlarm(ctx context.Context, a backends.Alarm) error {
	if err := a.Check(); err != nil {
		return err
	}
	return s.db.Update(func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketMessages).Get([]byte(a.MessageID)) == nil {
			return fmt.Errorf("alarm %s of %s: %w", a.Kind, a.MessageID, backends.ErrNotFound)
		}
		return setAlarm(tx, a)
	})
}

func (s *Store) ClearAlarm(ctx context.Context, kind, messageID string) error {
	return s.db.Update(func(tx *bbolt.Tx) error { return clearAlarm(tx, kind, messageID) })
}

func (s *Store) DueAlarms(ctx context.Context, kind string, now time.Time, limit int) ([]backends.Alarm, error) {
	var out []backends.Alarm
	err := s.db.View(func(tx *bbolt.Tx) error {
		prefix := pairKey(kind, "")
		end := u64(unixNano(now))
		c := tx.Bucket(bucketAlarms).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(out) < limit; k, _ = c.Next() {
			rest := k[len(prefix):]
			if bytes.Compare(rest[:8], end) > 0 {
				break
			}
			out = append(out, backends.Alarm{Kind: kind, MessageID: timeIDKeyID(rest),
				At: time.Unix(0, int64(binary.BigEndian.Uint64(rest[:8]))).UTC()})
		}
		return nil
	})
	return out, err
}
