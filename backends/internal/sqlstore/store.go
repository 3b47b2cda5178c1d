package sqlstore

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/genropy/postino/backends"
)

// Store is a SQL store as the code here drives it: its database, how it
// reads a message row, its transactions, and what its driver's errors
// say. Each store makes one of its own at Open; its methods are the parts
// of backends.Outbox that the SQL stores do alike, given the store's
// statements.
type Store struct {
	// DB is the store's pool.
	DB DB
	// Scan reads a message's columns, then extra, from a row.
	Scan ScanFunc
	// ScanEvent reads an event's columns from a row.
	ScanEvent func(r Scanner) (*backends.Event, error)
	// ScanID reads a row of an id, or another key (a batch's code).
	ScanID func(r Scanner) (string, error)
	// ByID reads a message by its id.
	ByID func(id string) Stmt
	// InTx runs fn in a transaction of the store's, again after a
	// deadlock, and commits it unless fn fails.
	InTx func(ctx context.Context, fn func(Tx) error) error
	// Fault reads what an error of the store's driver says.
	Fault func(error) Fault
	// Time is t as the store's columns keep it: UTC, within their range.
	Time func(t time.Time) time.Time
}

// ScanFunc reads a message's columns, then extra, from a row: each store
// reads its own driver's types.
type ScanFunc func(r Scanner, extra ...any) (*backends.Message, error)

// Tx is a store's transaction as the shared steps drive it: the rows it
// locks and moves in memory (LockTx), its statements (DB), and the writes
// of what the moves changed.
type Tx interface {
	LockTx
	DB
	// Write writes what the moves changed: the transaction's last
	// statements.
	Write() error
	// EventsDue says that the transaction made events pending and due
	// with a statement of its own: a store that tells the other relays
	// of work made due does it with the commit.
	EventsDue()
}

// messages reads the messages st selects.
func (s Store) messages(ctx context.Context, db DB, st Stmt) ([]*backends.Message, error) {
	return QueryAll(ctx, db, func(r Scanner) (*backends.Message, error) { return s.Scan(r) }, st)
}

// Retry runs attempt, a transaction, again while it fails with an error
// that retryable says another attempt may not meet (a deadlock, a lock
// wait timeout), eight times at most, after a jittered backoff from 5 ms.
func Retry(retryable func(error) bool, attempt func() error) error {
	backoff := 5 * time.Millisecond
	for n := 1; ; n++ {
		err := attempt()
		if err == nil || !retryable(err) || n == 8 {
			return err
		}
		time.Sleep(backoff/2 + rand.N(backoff))
		backoff *= 2
	}
}
