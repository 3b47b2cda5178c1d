package dynamodb

import (
	"maps"
	"sync"
)

// recentLimit bounds how many messages a store remembers.
const recentLimit = 4096

// recent remembers the _META items this store wrote last, so that the
// transition a worker makes of a message it just claimed needs no read
// first: the write is conditional on the revision remembered, and a
// message another relay changed since is read again (see transition).
type recent struct {
	mu    sync.Mutex
	metas map[string]meta
}

// remember keeps a copy of m as it was written.
func (r *recent) remember(m *meta) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.metas == nil {
		r.metas = map[string]meta{}
	}
	if len(r.metas) >= recentLimit {
		for id := range r.metas { // any one: most are used once, soon
			delete(r.metas, id)
			break
		}
	}
	r.metas[m.msg.ID] = m.clone()
}

// take returns, and forgets, the message remembered under id.
func (r *recent) take(id string) (*meta, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.metas[id]
	delete(r.metas, id)
	return &m, ok
}

// clone copies m, its maps with it, since a change is prepared on m in
// place.
func (m *meta) clone() meta {
	c := *m
	c.reached = make(map[string]int64, len(m.reached))
	for k, v := range m.reached {
		c.reached[k] = v
	}
	c.alarms = make(map[string]string, len(m.alarms))
	for k, v := range m.alarms {
		c.alarms[k] = v
	}
	c.receipts = maps.Clone(m.receipts)
	return c
}
