package sqlstore

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/genropy/postino/backends"
)

// Get is Messages.Get: backends.ErrNotFound when there is no message id.
func (s Store) Get(ctx context.Context, id string) (*backends.Message, error) {
	st := s.ByID(id)
	rows, err := s.DB.Query(ctx, st.Query, st.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("message %s: %w", id, backends.ErrNotFound)
	}
	return s.Scan(rows)
}

// History is Messages.History: the rows of message id that st selects
// (status, reason, time, details), in order.
func (s Store) History(ctx context.Context, id string, st Stmt) ([]backends.HistoryEntry, error) {
	return ofMessage(ctx, s, id, scanHistory, st)
}

// ofMessage reads with scan the rows of message id that st selects. When
// there are none, it reads the message, to tell one with none from none
// (backends.ErrNotFound).
func ofMessage[T any](ctx context.Context, s Store, id string, scan func(Scanner) (T, error), st Stmt) ([]T, error) {
	out, err := QueryAll(ctx, s.DB, scan, st)
	if err == nil && len(out) == 0 {
		_, err = s.Get(ctx, id)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ByMessageID is Messages.ByMessageID: the messages st selects.
func (s Store) ByMessageID(ctx context.Context, st Stmt) ([]*backends.Message, error) {
	return s.messages(ctx, s.DB, st)
}

func scanHistory(r Scanner) (backends.HistoryEntry, error) {
	var e backends.HistoryEntry
	var reason, details *string
	if err := r.Scan(&e.Status, &reason, &e.At, &details); err != nil {
		return e, err
	}
	e.Reason = str(reason)
	if d := str(details); d != "" {
		e.Details = json.RawMessage(d)
	}
	return e, nil
}

// str reads a nullable text column.
func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// Counts reads the rows of a status and a number that st selects into
// the number of each status, those of zero left out.
func (s Store) Counts(ctx context.Context, st Stmt) (map[backends.Status]int, error) {
	return counts(ctx, s.DB, st)
}

func counts(ctx context.Context, db DB, st Stmt) (map[backends.Status]int, error) {
	rows, err := db.Query(ctx, st.Query, st.Args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[backends.Status]int{}
	for rows.Next() {
		var st backends.Status
		var n int64
		if err := rows.Scan(&st, &n); err != nil {
			return nil, err
		}
		if n != 0 {
			out[st] = int(n)
		}
	}
	return out, rows.Err()
}

// Listing is what a SQL store's List reads: a page of a status's messages
// of one claim_held, a page of every message, and a page of a batch's
// messages (of q.Status when set), each from the cursor on (nil: the first
// page), in rows of a message's columns and its queue time.
type Listing struct {
	Status func(q backends.ListQuery, after *ListKey, held bool) Stmt
	All    func(q backends.ListQuery, after *ListKey) Stmt
	Batch  func(q backends.ListQuery, after *ListKey) Stmt
}

// List is a SQL store's List (ListPages). A batch's messages are listed
// in id order from the index of batches, whose entries end with the id,
// the status, when asked for, a filter of the rows. A status is listed in
// claim order from the claim index, one range per value of claim_held
// (READY's held messages are listed too), each read from the cursor on in
// index order, and merged; every message, newest first.
func (s Store) List(ctx context.Context, l Listing, q backends.ListQuery) ([]*backends.Message, string, error) {
	if q.Batch != "" {
		if err := backends.CheckBatch(q.Batch); err != nil {
			return nil, "", err
		}
	}
	return ListPages(q, func(q backends.ListQuery, after *ListKey) ([]Listed, error) {
		if q.Batch != "" {
			return s.listed(ctx, l.Batch(q, after))
		}
		if q.Status == "" {
			return s.listed(ctx, l.All(q, after))
		}
		helds := []bool{false}
		if q.Status == backends.StatusReady {
			helds = append(helds, true)
		}
		var out []Listed
		for _, held := range helds {
			page, err := s.listed(ctx, l.Status(q, after, held))
			if err != nil {
				return nil, err
			}
			out = append(out, page...)
		}
		SortListed(out)
		return out, nil
	})
}

// listed reads the messages st selects, each with its queue time.
func (s Store) listed(ctx context.Context, st Stmt) ([]Listed, error) {
	return QueryAll(ctx, s.DB, func(r Scanner) (Listed, error) {
		var qa time.Time
		m, err := s.Scan(r, &qa)
		if err != nil {
			return Listed{}, err
		}
		return ListedAt(m, qa), nil
	}, st)
}
