package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/genropy/postino/backends"
)

func (s *Store) Create(ctx context.Context, m *backends.Message) error {
	// The file is one relay's own: bytes in it serve no other relay, and
	// bbolt never gives back the space of deleted ones. The spool does both
	// jobs better.
	if m.Body != nil {
		return backends.ErrBodiesNotKept
	}
	if err := m.PrepareCreate(time.Now().UTC()); err != nil {
		return err
	}
	m.Version = 1
	rec, err := json.Marshal(m)
	if err != nil {
		return err
	}
	hist, err := json.Marshal(backends.HistoryEntry{Status: m.Status, Reason: m.Reason, At: m.CreatedAt})
	if err != nil {
		return err
	}
	var dup bool
	err = s.write(ctx, func(tx *bbolt.Tx) error {
		dup = false
		msgs := tx.Bucket(bucketMessages)
		if msgs.Get([]byte(m.ID)) != nil {
			dup = true
			return nil
		}
		if err := msgs.Put([]byte(m.ID), rec); err != nil {
			return err
		}
		if err := index(tx, m); err != nil {
			return err
		}
		if err := tally(tx, backends.ActivityAccepted); err != nil {
			return err
		}
		if err := tx.Bucket(bucketCreated).Put(timeIDKey(m.CreatedAt, m.ID), nil); err != nil {
			return err
		}
		if m.MessageID != "" {
			if err := tx.Bucket(bucketMsgIDs).Put(pairKey(m.MessageID, m.ID), nil); err != nil {
				return err
			}
		}
		if m.Batch != "" {
			if err := tx.Bucket(bucketBatchMsgs).Put(pairKey(m.Batch, m.ID), nil); err != nil {
				return err
			}
		}
		return putHistory(tx, m.ID, hist)
	})
	if err != nil {
		return fmt.Errorf("create message %s: %w", m.ID, err)
	}
	if dup {
		return fmt.Errorf("create message %s: %w", m.ID, backends.ErrDuplicate)
	}
	return nil
}

func (s *Store) Get(ctx context.Context, id string) (*backends.Message, error) {
	var m *backends.Message
	err := s.db.View(func(tx *bbolt.Tx) error {
		var err error
		m, err = get(tx, id)
		return err
	})
	return m, err
}

func (s *Store) History(ctx context.Context, id string) ([]backends.HistoryEntry, error) {
	var out []backends.HistoryEntry
	err := s.db.View(func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketMessages).Get([]byte(id)) == nil {
			return fmt.Errorf("message %s: %w", id, backends.ErrNotFound)
		}
		prefix := append([]byte(id), 0)
		c := tx.Bucket(bucketHistory).Cursor()
		for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			var e backends.HistoryEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("history of %s: %w", id, err)
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

func (s *Store) ByMessageID(ctx context.Context, messageID string) ([]*backends.Message, error) {
	var out []*backends.Message
	err := s.db.View(func(tx *bbolt.Tx) error {
		prefix := append([]byte(messageID), 0)
		c := tx.Bucket(bucketMsgIDs).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			m, err := get(tx, string(k[len(prefix):]))
			if err != nil {
				return err
			}
			out = append(out, m)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sortByCreated(out)
	return out, nil
}

func sortByCreated(ms []*backends.Message) {
	slices.SortStableFunc(ms, func(a, b *backends.Message) int { return a.CreatedAt.Compare(b.CreatedAt) })
}

// listSource is one index a listing walks, in order.
type listSource struct {
	bucket  []byte
	prefix  []byte
	reverse bool
	id      func(key []byte) string
}

// listSources are the indexes a listing walks: the queue index of a status
// (READY includes the held messages of suspended batches after the
// others), or the creation index, newest first.
func listSources(st backends.Status, batch string) []listSource {
	if batch != "" {
		prefix := pairKey(batch, "")
		return []listSource{{bucketBatchMsgs, prefix, false, func(k []byte) string { return string(k[len(prefix):]) }}}
	}
	if st == "" {
		return []listSource{{bucketCreated, nil, true, timeIDKeyID}}
	}
	p := append([]byte(st), 0)
	out := []listSource{{bucketQueue, p, false, queueKeyID}}
	if st == backends.StatusReady {
		out = append(out, listSource{bucketHeld, p, false, queueKeyID})
	}
	return out
}

// first positions c on the first key of src after start (nil: from the
// beginning of src).
func (src listSource) first(c *bbolt.Cursor, start []byte) []byte {
	var k []byte
	switch {
	case start == nil && !src.reverse:
		k, _ = c.Seek(src.prefix)
	case start == nil:
		k, _ = c.Last()
	case !src.reverse:
		if k, _ = c.Seek(start); bytes.Equal(k, start) {
			k, _ = c.Next()
		}
	default:
		if k, _ = c.Seek(start); k == nil || bytes.Compare(k, start) >= 0 {
			k, _ = c.Prev()
		}
	}
	return k
}

func (src listSource) next(c *bbolt.Cursor) []byte {
	var k []byte
	if src.reverse {
		k, _ = c.Prev()
	} else {
		k, _ = c.Next()
	}
	return k
}

// listItem is a listed message and where its source's walk found it.
type listItem struct {
	m   *backends.Message
	src int
	key []byte
}

// List walks the sources of the query. A cursor is the hex of the source's
// position and the last key returned.
func (s *Store) List(ctx context.Context, q backends.ListQuery) ([]*backends.Message, string, error) {
	limit := q.PageSize()
	after, err := hex.DecodeString(q.After)
	if err != nil || (len(after) == 1) {
		return nil, "", fmt.Errorf("list cursor %q was not given by this store: %w", q.After, backends.ErrBadCursor)
	}
	var items []listItem
	err = s.db.View(func(tx *bbolt.Tx) error {
		items, err = walkSources(tx, listSources(q.Status, q.Batch), after, limit+1, q.Status)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	var next string
	if len(items) > limit {
		items = items[:limit]
		last := items[len(items)-1]
		next = hex.EncodeToString(append([]byte{byte(last.src)}, last.key...))
	}
	out := make([]*backends.Message, len(items))
	for i, it := range items {
		out[i] = it.m
	}
	return out, next, nil
}

// walkSources reads up to n messages from the sources in turn, starting
// after the position of a cursor (empty: from the start), keeping those in
// status when it is set.
func walkSources(tx *bbolt.Tx, sources []listSource, after []byte, n int, status backends.Status) ([]listItem, error) {
	var items []listItem
	for si, src := range sources {
		var start []byte
		if len(after) > 0 {
			if int(after[0]) > si {
				continue
			}
			if int(after[0]) == si {
				start = after[1:]
			}
		}
		c := tx.Bucket(src.bucket).Cursor()
		for k := src.first(c, start); k != nil && bytes.HasPrefix(k, src.prefix); k = src.next(c) {
			m, err := get(tx, src.id(k))
			if err != nil {
				return nil, err
			}
			if status != "" && m.Status != status {
				continue
			}
			if items = append(items, listItem{m, si, bytes.Clone(k)}); len(items) == n {
				return items, nil
			}
		}
	}
	return items, nil
}

func (s *Store) Counts(ctx context.Context) (map[backends.Status]int, error) {
	out := make(map[backends.Status]int)
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketCounts).ForEach(func(k, v []byte) error {
			if n := int(binary.BigEndian.Uint64(v)); n > 0 {
				out[backends.Status(k)] = n
			}
			return nil
		})
	})
	return out, err
}
