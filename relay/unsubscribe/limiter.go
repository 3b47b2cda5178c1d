package unsubscribe

import (
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxClients bounds the clients the limiter remembers at once, so that an
// attacker with many addresses cannot grow memory without end (about 100
// bytes an entry).
const maxClients = 10000

// limiter keeps a token bucket per client: an address, or an IPv6 /64,
// which one machine usually has whole.
type limiter struct {
	limit rate.Limit
	burst int

	mu      sync.Mutex
	clients map[netip.Prefix]*client
}

type client struct {
	bucket *rate.Limiter
	seen   time.Time
}

func newLimiter(perSecond float64, burst int) *limiter {
	return &limiter{limit: rate.Limit(perSecond), burst: max(burst, 1), clients: make(map[netip.Prefix]*client)}
}

func clientPrefix(ip netip.Addr) netip.Prefix {
	ip = ip.Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p
}

// allow takes a request of ip from its bucket, or reports how long the
// client should wait.
func (l *limiter) allow(ip netip.Addr, now time.Time) (bool, time.Duration) {
	key := clientPrefix(ip)
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.clients[key]
	if c == nil {
		l.makeRoom(now)
		c = &client{bucket: rate.NewLimiter(l.limit, l.burst)}
		l.clients[key] = c
	}
	c.seen = now
	if c.bucket.AllowN(now, 1) {
		return true, 0
	}
	return false, time.Duration(float64(time.Second) / float64(l.limit))
}

// makeRoom drops entries when the table is full. The caller holds mu. A
// few entries, in map order (which is random), are looked at: those whose
// bucket is full again go, since a new entry would be the same; if none
// is, the one seen longest ago goes. An attacker with many addresses can
// push others out that way, which gives them a fresh bucket and no more;
// memory stays bounded and an insertion costs the same with any table.
func (l *limiter) makeRoom(now time.Time) {
	if len(l.clients) < maxClients {
		return
	}
	var oldest netip.Prefix
	var seen time.Time
	looked, found := 0, false
	for key, c := range l.clients {
		if c.bucket.TokensAt(now) >= float64(l.burst) {
			delete(l.clients, key)
		} else if !found || c.seen.Before(seen) {
			oldest, seen, found = key, c.seen, true
		}
		if looked++; looked == 8 {
			break
		}
	}
	if found && len(l.clients) >= maxClients {
		delete(l.clients, oldest)
	}
}

func (l *limiter) tracked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}
