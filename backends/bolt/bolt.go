// Package bolt is the embedded outbox store: one bbolt file beside the spool.
// It is the default for a relay that runs alone; a file lock keeps a second
// process away.
package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	bbolt "go.etcd.io/bbolt"
	bbolterrors "go.etcd.io/bbolt/errors"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/groupcommit"
)

// Bucket names. Every index lives beside the rows and changes in the same
// transaction, so a crash never leaves an index out of step.
var (
	bucketMessages  = []byte("messages")  // id -> Message JSON
	bucketHistory   = []byte("history")   // id 0x00 seq -> HistoryEntry JSON
	bucketQueue     = []byte("queue")     // queue key -> nil, one per message
	bucketHeld      = []byte("held")      // queue key of READY messages of suspended batches
	bucketLeases    = []byte("leases")    // lease time, id -> nil, for working statuses
	bucketMsgIDs    = []byte("msgids")    // Message-ID 0x00 id -> nil
	bucketCreated   = []byte("created")   // created time, id -> nil
	bucketBatches   = []byte("batches")   // suspended batch code -> suspension time
	bucketBatchMsgs = []byte("batchmsgs") // batch code 0x00 id -> nil
	bucketCounts    = []byte("counts")    // status -> count
	bucketActivity  = []byte("activity")  // minute, activity -> count (backends.Throughput)
	bucketMeta      = []byte("meta")      // "schema" -> version
)

// schemaVersion is the layout this code writes; upgrade brings an older
// file to it.
const schemaVersion = 2

// Options tune the store.
type Options struct {
	// LockTimeout bounds the wait for the file lock held by another process.
	LockTimeout time.Duration
}

// Store is an outbox in a bbolt file.
//
// Writes go through one group commit (internal/groupcommit) that runs every
// write waiting in a single transaction: while one commit is on its way to
// the disk, the next group gathers, so the groups grow with the load and the
// disk's latency. (bbolt's own Batch waits a fixed delay instead, which
// makes small groups on a slow disk and adds latency on an idle one.)
type Store struct {
	db      *bbolt.DB
	commits *groupcommit.Committer[func(*bbolt.Tx) error]

	closeOnce sync.Once
}

// commitConfig shapes the outbox's commits. Each costs two fdatasyncs
// whatever its size, so under load a commit waits up to 3 ms for more
// writes (fewer, larger commits take less of the disk and the CPU), and
// holds at most 512 so that its transaction stays small.
var commitConfig = groupcommit.Config{Max: 512, Window: 3 * time.Millisecond}

var _ backends.Outbox = (*Store)(nil)

// Open opens or creates the outbox file at path.
func Open(path string, opts Options) (*Store, error) {
	if opts.LockTimeout == 0 {
		opts.LockTimeout = 2 * time.Second
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{
		Timeout:         opts.LockTimeout,
		NoFreelistSync:  true,
		FreelistType:    bbolt.FreelistMapType,
		InitialMmapSize: 64 << 20,
	})
	if errors.Is(err, bbolterrors.ErrTimeout) {
		return nil, fmt.Errorf("open outbox %s: the file is locked by another process; is another postino using the same data directory?", path)
	}
	if err != nil {
		return nil, fmt.Errorf("open outbox %s: %w", path, err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, name := range append([][]byte{bucketMessages, bucketHistory, bucketQueue, bucketHeld, bucketLeases,
			bucketMsgIDs, bucketCreated, bucketBatches, bucketBatchMsgs, bucketCounts, bucketActivity, bucketMeta, bucketCursors, bucketLinks, bucketMsgLinks,
			bucketAlarms, bucketMsgAlarms, bucketTallies, bucketDocuments, bucketDocExpiry}, append(eventBuckets(), suppressionBuckets()...)...) {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return upgrade(tx)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open outbox %s: %w", path, err)
	}
	s := &Store{db: db}
	s.commits = groupcommit.New(commitConfig, groupcommit.BoltUpdates(db))
	return s, nil
}

// Close waits for the writes handed over already and closes the file.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.commits.Close()
		err = s.db.Close()
	})
	return err
}

// write runs fn in a transaction shared with the other writes waiting, and
// returns once it is committed. fn may run more than once: when another
// write of its group fails, each is run again alone. ctx withdraws the
// write only until a group takes it (groupcommit.Pending.Wait).
func (s *Store) write(ctx context.Context, fn func(*bbolt.Tx) error) error {
	return s.commits.Do(ctx, fn)
}

func (s *Store) Ping(ctx context.Context) error {
	return s.db.View(func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketMessages) == nil {
			return errors.New("outbox file has no messages bucket")
		}
		return nil
	})
}

func get(tx *bbolt.Tx, id string) (*backends.Message, error) {
	v := tx.Bucket(bucketMessages).Get([]byte(id))
	if v == nil {
		return nil, fmt.Errorf("message %s: %w", id, backends.ErrNotFound)
	}
	return decode(id, v)
}

func decode(id string, v []byte) (*backends.Message, error) {
	m := new(backends.Message)
	if err := json.Unmarshal(v, m); err != nil {
		return nil, fmt.Errorf("message %s: stored record is unreadable: %w", id, err)
	}
	return m, nil
}

func putHistory(tx *bbolt.Tx, id string, entry []byte) error {
	h := tx.Bucket(bucketHistory)
	seq, err := h.NextSequence()
	if err != nil {
		return err
	}
	return h.Put(append(pairKey(id, ""), u64(seq)...), entry)
}

// index adds the entries of m's current status: its queue key (held when it
// is READY in a suspended batch), its lease, and the status count.
func index(tx *bbolt.Tx, m *backends.Message) error {
	queue := tx.Bucket(bucketQueue)
	if m.Status == backends.StatusReady && m.Batch != "" && tx.Bucket(bucketBatches).Get([]byte(m.Batch)) != nil {
		queue = tx.Bucket(bucketHeld)
	}
	if err := queue.Put(queueKey(m), nil); err != nil {
		return err
	}
	if m.Status.Working() {
		if err := tx.Bucket(bucketLeases).Put(timeIDKey(m.LeaseUntil, m.ID), nil); err != nil {
			return err
		}
	}
	return count(tx, m.Status, 1)
}

// unindex removes what index added.
func unindex(tx *bbolt.Tx, m *backends.Message) error {
	k := queueKey(m)
	if err := tx.Bucket(bucketQueue).Delete(k); err != nil {
		return err
	}
	if err := tx.Bucket(bucketHeld).Delete(k); err != nil {
		return err
	}
	if m.Status.Working() {
		if err := tx.Bucket(bucketLeases).Delete(timeIDKey(m.LeaseUntil, m.ID)); err != nil {
			return err
		}
	}
	return count(tx, m.Status, -1)
}

func count(tx *bbolt.Tx, st backends.Status, delta int64) error {
	return add(tx.Bucket(bucketCounts), []byte(st), delta)
}

// add adds delta to the counter of b under k, never below 0.
func add(b *bbolt.Bucket, k []byte, delta int64) error {
	var n int64
	if v := b.Get(k); v != nil {
		n = int64(binary.BigEndian.Uint64(v))
	}
	n += delta
	if n < 0 {
		n = 0
	}
	return b.Put(k, u64(uint64(n)))
}

// queueKey orders a status's messages for claims and retention: status,
// 0x00, priority, queue time (backends.Message.QueueTime), creation time,
// id.
func queueKey(m *backends.Message) []byte {
	k := make([]byte, 0, len(m.Status)+18+len(m.ID))
	k = append(k, m.Status...)
	k = append(k, 0, byte(m.Priority))
	k = binary.BigEndian.AppendUint64(k, unixNano(m.QueueTime()))
	k = binary.BigEndian.AppendUint64(k, unixNano(m.CreatedAt))
	return append(k, m.ID...)
}

func queueKeyID(k []byte) string {
	i := bytes.IndexByte(k, 0)
	return string(k[i+18:])
}

func timeIDKey(t time.Time, id string) []byte {
	return append(u64(unixNano(t)), id...)
}

func timeIDKeyID(k []byte) string { return string(k[8:]) }

// suffixesUnder returns what follows prefix in each key of b that starts
// with it, copied: the caller then changes the buckets, which a cursor does
// not survive.
func suffixesUnder(b *bbolt.Bucket, prefix []byte) []string {
	var out []string
	for _, k := range keysUnder(b, prefix) {
		out = append(out, string(k[len(prefix):]))
	}
	return out
}

// keysUnder returns the keys of b that start with prefix, copied.
func keysUnder(b *bbolt.Bucket, prefix []byte) [][]byte {
	var out [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		out = append(out, bytes.Clone(k))
	}
	return out
}

func pairKey(a, b string) []byte {
	k := make([]byte, 0, len(a)+1+len(b))
	k = append(k, a...)
	k = append(k, 0)
	return append(k, b...)
}

// unixNano maps times before 1970 (the zero time included) to 0 so that they
// sort first.
func unixNano(t time.Time) uint64 {
	if t.Before(time.Unix(0, 0)) {
		return 0
	}
	return uint64(t.UnixNano())
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
