package sqlstore

import (
	"cmp"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
)

// ListKey is where a message stands in a SQL store's listing, and so where
// the next page starts: for a listing of a status the claim order
// (priority, queue time, creation, id), for one of every message the
// creation and id, for one of a batch the id. The cursor List returns is its JSON, in base64.
type ListKey struct {
	Priority int       `json:"p,omitempty"`
	At       time.Time `json:"a"`
	Created  time.Time `json:"c"`
	ID       string    `json:"i"`
}

// Compare orders keys in claim order.
func (k ListKey) Compare(o ListKey) int {
	return cmp.Or(cmp.Compare(k.Priority, o.Priority), k.At.Compare(o.At), k.Created.Compare(o.Created), strings.Compare(k.ID, o.ID))
}

// Listed is a message of a listing, with the key it stands at.
type Listed struct {
	Message *backends.Message
	Key     ListKey
}

// ListedAt is m listed with queue time at.
func ListedAt(m *backends.Message, at time.Time) Listed {
	return Listed{m, ListKey{Priority: m.Priority, At: at, Created: m.CreatedAt, ID: m.ID}}
}

// SortListed sorts in claim order the pages a store read from several
// ranges of its claim index.
func SortListed(l []Listed) {
	slices.SortFunc(l, func(a, b Listed) int { return a.Key.Compare(b.Key) })
}

// ListPages is the List of a SQL store: it reads the cursor q.After (nil
// for the first page), has read fetch up to q.Limit+1 messages from there,
// the one past the page telling that another follows, and returns the
// page and the cursor of the next ("" when none).
func ListPages(q backends.ListQuery, read func(q backends.ListQuery, after *ListKey) ([]Listed, error)) ([]*backends.Message, string, error) {
	q.Limit = q.PageSize()
	var after *ListKey
	if q.After != "" {
		b, err := base64.RawURLEncoding.DecodeString(q.After)
		after = new(ListKey)
		if err != nil || json.Unmarshal(b, after) != nil {
			return nil, "", fmt.Errorf("list cursor %q was not given by this store: %w", q.After, backends.ErrBadCursor)
		}
	}
	page, err := read(q, after)
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(page) > q.Limit {
		page = page[:q.Limit]
		b, _ := json.Marshal(page[len(page)-1].Key)
		next = base64.RawURLEncoding.EncodeToString(b)
	}
	out := make([]*backends.Message, len(page))
	for i, l := range page {
		out[i] = l.Message
	}
	return out, next, nil
}
