// Package bolt is the embedded outbox store: one bbolt file beside the spool.
// It is the default for a relay that runs alone; a file lock keeps a second
// process away.
package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	bbolt "go.etcd.io/bbolt"
	bbolterrors "go.etcd.io/bbolt/errors"

	"github.com/genropy/postino/backends"
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
	bucketMeta      = []byte("meta")      // "schema" -> version
)

const schemaVersion = 1

// Options tune the store.
type Options struct {
	// LockTimeout bounds the wait for the file lock held by another process.
	LockTimeout time.Duration
}

// Store is an outbox in a bbolt file.
//
// Writes go through one committer goroutine that runs every write waiting
// for it in a single transaction: while one commit is on its way to the
// disk, the next group gathers, so the groups grow with the load and the
// disk's latency. (bbolt's own Batch waits a fixed delay instead, which
// makes small groups on a slow disk and adds latency on an idle one.)
type Store struct {
	db     *bbolt.DB
	writes chan writeReq
	quit   chan struct{}
	done   chan struct{}

	closeOnce sync.Once
	lastGroup int // size of the previous commit: above 1 means load
}

type writeReq struct {
	fn   func(*bbolt.Tx) error
	done chan error
}

const (
	// maxGroup bounds one commit, so that its transaction stays small.
	maxGroup = 512
	// groupWindow bounds how long a commit waits for more writes under
	// load. Each commit costs two fdatasyncs whatever its size, so under
	// load fewer, larger commits take less of the disk and the CPU.
	groupWindow = 3 * time.Millisecond
)

// errClosed is returned by writes after Close.
var errClosed = errors.New("outbox is closed")

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
			bucketMsgIDs, bucketCreated, bucketBatches, bucketBatchMsgs, bucketCounts, bucketMeta, bucketCursors, bucketLinks, bucketMsgLinks}, eventBuckets()...) {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		meta := tx.Bucket(bucketMeta)
		if v := meta.Get([]byte("schema")); v != nil {
			if got := binary.BigEndian.Uint64(v); got > schemaVersion {
				return fmt.Errorf("outbox schema version %d is newer than this postino understands (%d); run a newer postino", got, schemaVersion)
			}
			return nil
		}
		return meta.Put([]byte("schema"), u64(schemaVersion))
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("open outbox %s: %w", path, err)
	}
	s := &Store{db: db, writes: make(chan writeReq), quit: make(chan struct{}), done: make(chan struct{})}
	go s.committer()
	return s, nil
}

// Close waits for the commit in progress and closes the file.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.quit)
		<-s.done
		err = s.db.Close()
	})
	return err
}

// write runs fn in a transaction shared with the other writes waiting, and
// returns once it is committed. fn may run more than once: when another
// write of its group fails, each is run again alone.
func (s *Store) write(fn func(*bbolt.Tx) error) error {
	req := writeReq{fn: fn, done: make(chan error, 1)}
	select {
	case s.writes <- req:
	case <-s.quit:
		return errClosed
	}
	return <-req.done
}

func (s *Store) committer() {
	defer close(s.done)
	group := make([]writeReq, 0, maxGroup)
	timer := time.NewTimer(0)
	<-timer.C
	for {
		select {
		case <-s.quit:
			return
		case first := <-s.writes:
			group = append(group[:0], first)
		}
		// Under load, wait a moment for the writers that are about to come
		// (a whole group of sessions is released by the fsyncs of their
		// files at about the same time); when idle, commit at once.
		window := groupWindow
		if s.lastGroup <= 1 {
			window = 0
		}
		timer.Reset(window)
	gather:
		for len(group) < maxGroup {
			select {
			case r := <-s.writes:
				group = append(group, r)
			case <-timer.C:
				break gather
			}
		}
		timer.Stop() // since Go 1.23, no stale tick is left to drain
		s.lastGroup = len(group)
		s.commit(group)
	}
}

func (s *Store) commit(group []writeReq) {
	failed := false
	err := s.db.Update(func(tx *bbolt.Tx) error {
		for _, r := range group {
			if err := r.fn(tx); err != nil {
				failed = true
				return err
			}
		}
		return nil
	})
	if failed {
		// Keep one write's failure from failing the others.
		for _, r := range group {
			r.done <- s.db.Update(r.fn)
		}
		return
	}
	for _, r := range group {
		r.done <- err
	}
}

func (s *Store) Ping(ctx context.Context) error {
	return s.db.View(func(tx *bbolt.Tx) error {
		if tx.Bucket(bucketMessages) == nil {
			return errors.New("outbox file has no messages bucket")
		}
		return nil
	})
}

func (s *Store) Create(ctx context.Context, m *backends.Message) error {
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
	err = s.write(func(tx *bbolt.Tx) error {
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
	for i := 1; i < len(ms); i++ {
		for j := i; j > 0 && ms[j].CreatedAt.Before(ms[j-1].CreatedAt); j-- {
			ms[j], ms[j-1] = ms[j-1], ms[j]
		}
	}
}

// listSource is one index a listing walks, in order.
type listSource struct {
	bucket  []byte
	prefix  []byte
	reverse bool
	id      func(key []byte) string
}

// List walks the queue index for a status (READY includes the held messages
// of suspended batches after the others) or the creation index, newest first.
// A cursor is the hex of the source's position and the last key returned.
func (s *Store) List(ctx context.Context, q backends.ListQuery) ([]*backends.Message, string, error) {
	if q.Limit <= 0 {
		q.Limit = 100
	}
	after, err := hex.DecodeString(q.After)
	if err != nil || (len(after) == 1) {
		return nil, "", fmt.Errorf("list cursor %q was not given by this store", q.After)
	}
	var sources []listSource
	if q.Status != "" {
		p := append([]byte(q.Status), 0)
		sources = append(sources, listSource{bucketQueue, p, false, queueKeyID})
		if q.Status == backends.StatusReady {
			sources = append(sources, listSource{bucketHeld, p, false, queueKeyID})
		}
	} else {
		sources = append(sources, listSource{bucketCreated, nil, true, timeIDKeyID})
	}
	type item struct {
		m   *backends.Message
		src int
		key []byte
	}
	var items []item
	err = s.db.View(func(tx *bbolt.Tx) error {
		for si, src := range sources {
			var start []byte
			if len(after) > 0 {
				switch {
				case int(after[0]) > si:
					continue
				case int(after[0]) == si:
					start = after[1:]
				}
			}
			c := tx.Bucket(src.bucket).Cursor()
			var k []byte
			switch {
			case start == nil && !src.reverse:
				k, _ = c.Seek(src.prefix)
			case start == nil:
				k, _ = c.Last()
			case !src.reverse:
				k, _ = c.Seek(start)
				if bytes.Equal(k, start) {
					k, _ = c.Next()
				}
			default:
				k, _ = c.Seek(start)
				if k == nil || bytes.Compare(k, start) >= 0 {
					k, _ = c.Prev()
				}
			}
			for ; k != nil && bytes.HasPrefix(k, src.prefix); k = step(c, src.reverse) {
				m, err := get(tx, src.id(k))
				if err != nil {
					return err
				}
				items = append(items, item{m, si, bytes.Clone(k)})
				if len(items) > q.Limit {
					return nil
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	var next string
	if len(items) > q.Limit {
		items = items[:q.Limit]
		last := items[len(items)-1]
		next = hex.EncodeToString(append([]byte{byte(last.src)}, last.key...))
	}
	out := make([]*backends.Message, len(items))
	for i, it := range items {
		out[i] = it.m
	}
	return out, next, nil
}

func step(c *bbolt.Cursor, reverse bool) []byte {
	var k []byte
	if reverse {
		k, _ = c.Prev()
	} else {
		k, _ = c.Next()
	}
	return k
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

func (s *Store) Transition(ctx context.Context, t backends.Transition) error {
	if err := t.Check(); err != nil {
		return fmt.Errorf("message %s: %w", t.ID, err)
	}
	if t.At.IsZero() {
		t.At = time.Now().UTC()
	}
	pre := s.prepare(t)
	var refused error
	var event *backends.Event
	err := s.write(func(tx *bbolt.Tx) error {
		refused, event = nil, nil
		// A refusal is not an error for the batch: the others in it must
		// still commit, so it is reported beside.
		v := tx.Bucket(bucketMessages).Get([]byte(t.ID))
		if v == nil {
			refused = backends.ErrNotFound
			return nil
		}
		c, err := pre.against(v, t)
		if errors.Is(err, backends.ErrLockNotAcquired) {
			refused = err
			return nil
		}
		if err != nil {
			return err
		}
		if err := c.store(tx); err != nil {
			return err
		}
		if t.Event != nil {
			e := *t.Event // a retried group must start from the caller's event
			if err := insertEvent(tx, t.ID, &e, t.At); err != nil {
				return err
			}
			event = &e
		}
		return nil
	})
	if err == nil {
		err = refused
	}
	if err != nil {
		return fmt.Errorf("message %s %s to %s: %w", t.ID, t.From, t.To, err)
	}
	if event != nil {
		*t.Event = *event
	}
	return nil
}

// apply moves m, which is in t.From, through t inside tx.
func apply(tx *bbolt.Tx, m *backends.Message, t backends.Transition) error {
	c, err := plan(m, t)
	if err != nil {
		return err
	}
	return c.store(tx)
}

// change is a transition of one row worked out in full. Working it out
// (decoding and encoding the row) takes most of a transition's time, and
// every write of the relay runs in the one committer, one after another:
// so writers work their change out before their turn, and the committer
// only stores it, or works it out again when the row changed meanwhile.
type change struct {
	before backends.Message // the row as read, for the index entries to remove
	after  *backends.Message
	rec    []byte   // after, encoded
	hist   [][]byte // one history entry per move
}

// plan works out t's change of m and applies it to m. A chain's
// intermediate statuses leave no index entry and no count behind, so only
// its history tells them.
func plan(m *backends.Message, t backends.Transition) (*change, error) {
	c := &change{before: *m, after: m}
	t.Apply(m, t.Final())
	m.Version++
	var err error
	if c.rec, err = json.Marshal(m); err != nil {
		return nil, err
	}
	entry := func(e backends.HistoryEntry) {
		if err == nil {
			var b []byte
			b, err = json.Marshal(e)
			c.hist = append(c.hist, b)
		}
	}
	entry(backends.HistoryEntry{Status: t.To, Reason: t.Reason, At: t.At, Details: t.Details})
	for _, step := range t.Then {
		entry(backends.HistoryEntry{Status: step.To, Reason: step.Reason, At: t.At})
	}
	return c, err
}

func (c *change) store(tx *bbolt.Tx) error {
	if err := unindex(tx, &c.before); err != nil {
		return err
	}
	if err := index(tx, c.after); err != nil {
		return err
	}
	for _, h := range c.hist {
		if err := putHistory(tx, c.after.ID, h); err != nil {
			return err
		}
	}
	return tx.Bucket(bucketMessages).Put([]byte(c.after.ID), c.rec)
}

// prepared is a change worked out from a row read outside the committer.
type prepared struct {
	row []byte
	c   *change
}

// prepare reads t's row and works its change out. When the row cannot be
// read, the committer works it out and says why.
func (s *Store) prepare(t backends.Transition) prepared {
	var p prepared
	s.db.View(func(tx *bbolt.Tx) error {
		p = prepareRow(tx, t)
		return nil
	})
	return p
}

func prepareRow(tx *bbolt.Tx, t backends.Transition) prepared {
	v := tx.Bucket(bucketMessages).Get([]byte(t.ID))
	if v == nil {
		return prepared{}
	}
	row := bytes.Clone(v) // v lives only as long as tx
	m, err := decode(t.ID, row)
	if err != nil || m.Status != t.From {
		return prepared{}
	}
	c, err := plan(m, t)
	if err != nil {
		return prepared{}
	}
	return prepared{row: row, c: c}
}

// against returns the prepared change when the row v is still the one it
// was worked out from, or works it out from v; ErrLockNotAcquired when v is
// not in t.From.
func (p prepared) against(v []byte, t backends.Transition) (*change, error) {
	if p.c != nil && bytes.Equal(v, p.row) {
		return p.c, nil
	}
	m, err := decode(t.ID, v)
	if err != nil {
		return nil, err
	}
	if m.Status != t.From {
		return nil, backends.ErrLockNotAcquired
	}
	return plan(m, t)
}

func (s *Store) Claim(ctx context.Context, c backends.Claim) ([]*backends.Message, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	if c.Limit <= 0 {
		return nil, nil
	}
	move := func(id string) backends.Transition {
		return backends.Transition{ID: id, From: c.From, To: c.To, At: c.Now,
			Reason: c.Reason, KeepReason: true, LeaseUntil: c.LeaseUntil}
	}
	pre := map[string]prepared{}
	s.db.View(func(tx *bbolt.Tx) error {
		for _, id := range claimable(tx, c) {
			pre[id] = prepareRow(tx, move(id))
		}
		return nil
	})
	var out []*backends.Message
	err := s.write(func(tx *bbolt.Tx) error {
		out = out[:0]
		msgs := tx.Bucket(bucketMessages)
		for _, id := range claimable(tx, c) {
			v := msgs.Get([]byte(id))
			if v == nil {
				return fmt.Errorf("message %s is queued but has no row: %w", id, backends.ErrNotFound)
			}
			ch, err := pre[id].against(v, move(id))
			if errors.Is(err, backends.ErrLockNotAcquired) {
				continue // the queue index is behind its row: leave the row as it is
			}
			if err != nil {
				return err
			}
			if err := ch.store(tx); err != nil {
				return err
			}
			out = append(out, ch.after)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("claim %s: %w", c.From, err)
	}
	return out, nil
}

// claimable lists the ids c would take, in the order it takes them.
func claimable(tx *bbolt.Tx, c backends.Claim) []string {
	now := u64(unixNano(c.Now))
	var ids []string
	cur := tx.Bucket(bucketQueue).Cursor()
	for p := backends.PriorityImmediate; p <= backends.PriorityLow && len(ids) < c.Limit; p++ {
		prefix := append(append([]byte(c.From), 0), byte(p))
		for k, _ := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(ids) < c.Limit; k, _ = cur.Next() {
			if bytes.Compare(k[len(prefix):len(prefix)+8], now) > 0 {
				break // the rest of this priority is not due yet
			}
			ids = append(ids, queueKeyID(k))
		}
	}
	return ids
}

// restoreChunk bounds one restore transaction.
const restoreChunk = 500

func (s *Store) Restore(ctx context.Context, expiredBefore time.Time) (int, error) {
	total := 0
	for {
		n := 0
		now := time.Now().UTC()
		err := s.db.Update(func(tx *bbolt.Tx) error {
			n = 0
			limit := u64(unixNano(expiredBefore))
			var ids []string
			c := tx.Bucket(bucketLeases).Cursor()
			for k, _ := c.First(); k != nil && bytes.Compare(k[:8], limit) < 0 && len(ids) < restoreChunk; k, _ = c.Next() {
				ids = append(ids, timeIDKeyID(k))
			}
			for _, id := range ids {
				m, err := get(tx, id)
				if err != nil {
					return err
				}
				prev := m.Status.Previous()
				err = apply(tx, m, backends.Transition{ID: id, From: m.Status, To: prev, At: now, KeepReason: true,
					Reason: fmt.Sprintf("lease of %s expired at %s; returned to %s", m.Status, m.LeaseUntil.UTC().Format(time.RFC3339), prev)})
				if err != nil {
					return err
				}
			}
			ne, err := restoreEvents(tx, expiredBefore, now, restoreChunk)
			if err != nil {
				return err
			}
			n = len(ids) + ne
			return nil
		})
		total += n
		if err != nil {
			return total, fmt.Errorf("restore: %w", err)
		}
		if n == 0 {
			return total, nil
		}
	}
}

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
	prefix := pairKey(code, "")
	var ids []string
	c := tx.Bucket(bucketBatchMsgs).Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		ids = append(ids, string(k[len(prefix):]))
	}
	for _, id := range ids {
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

func (s *Store) Purge(ctx context.Context, cutoff time.Time, limit int) ([]*backends.Message, error) {
	var out []*backends.Message
	err := s.db.Update(func(tx *bbolt.Tx) error {
		out = out[:0]
		before := u64(unixNano(cutoff))
		var ids []string
		cur := tx.Bucket(bucketQueue).Cursor()
		for _, st := range backends.Statuses() {
			if !st.Acknowledged() {
				continue
			}
			for p := backends.PriorityImmediate; p <= backends.PriorityLow && len(ids) < limit; p++ {
				prefix := append(append([]byte(st), 0), byte(p))
				for k, _ := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(ids) < limit; k, _ = cur.Next() {
					if bytes.Compare(k[len(prefix):len(prefix)+8], before) >= 0 {
						break
					}
					ids = append(ids, queueKeyID(k))
				}
			}
		}
		for _, id := range ids {
			m, err := get(tx, id)
			if err != nil {
				return err
			}
			if err := remove(tx, m); err != nil {
				return err
			}
			out = append(out, m)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("purge: %w", err)
	}
	return out, nil
}

// remove deletes a message, its history and every index entry.
func remove(tx *bbolt.Tx, m *backends.Message) error {
	if err := unindex(tx, m); err != nil {
		return err
	}
	id := []byte(m.ID)
	if err := tx.Bucket(bucketMessages).Delete(id); err != nil {
		return err
	}
	if err := tx.Bucket(bucketCreated).Delete(timeIDKey(m.CreatedAt, m.ID)); err != nil {
		return err
	}
	if m.MessageID != "" {
		if err := tx.Bucket(bucketMsgIDs).Delete(pairKey(m.MessageID, m.ID)); err != nil {
			return err
		}
	}
	if m.Batch != "" {
		if err := tx.Bucket(bucketBatchMsgs).Delete(pairKey(m.Batch, m.ID)); err != nil {
			return err
		}
	}
	if err := removeEvents(tx, m.ID); err != nil {
		return err
	}
	if err := removeLinks(tx, m.ID); err != nil {
		return err
	}
	prefix := pairKey(m.ID, "")
	h := tx.Bucket(bucketHistory)
	var keys [][]byte
	c := h.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := h.Delete(k); err != nil {
			return err
		}
	}
	return nil
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
	b := tx.Bucket(bucketCounts)
	var n int64
	if v := b.Get([]byte(st)); v != nil {
		n = int64(binary.BigEndian.Uint64(v))
	}
	n += delta
	if n < 0 {
		n = 0
	}
	return b.Put([]byte(st), u64(uint64(n)))
}

// queueKey orders a status's messages for claims: status, 0x00, priority,
// a time, creation time, id. The time is the due time for READY, the
// creation time for ACCEPTED (oldest first, even when restored), and the
// time of the last change otherwise (which retention goes by).
func queueKey(m *backends.Message) []byte {
	t := m.UpdatedAt
	switch m.Status {
	case backends.StatusReady:
		t = m.DueAt
	case backends.StatusAccepted:
		t = m.CreatedAt
	}
	k := make([]byte, 0, len(m.Status)+18+len(m.ID))
	k = append(k, m.Status...)
	k = append(k, 0, byte(m.Priority))
	k = binary.BigEndian.AppendUint64(k, unixNano(t))
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
