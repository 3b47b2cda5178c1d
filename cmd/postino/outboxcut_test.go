package main

import (
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/genropy/postino/internal/smtptest"
)

// cutProxy forwards TCP connections to target until told to cut them: Cut
// closes every connection and refuses new ones for a while, as a database
// that drops off the network would.
type cutProxy struct {
	Addr   string
	target string

	mu     sync.Mutex
	conns  map[net.Conn]bool
	refuse time.Time
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{Addr: l.Addr().String(), target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		l.Close()
		p.Cut(time.Hour)
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
	return p
}

// track keeps c to be cut, or closes it when the proxy refuses.
func (p *cutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Now().Before(p.refuse) {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *cutProxy) forward(c net.Conn) {
	if !p.track(c) {
		return
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(s) {
		c.Close()
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		io.Copy(dst, src)
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go pipe(s, c)
	go pipe(c, s)
	<-done
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// Cut closes every connection and refuses new ones for d.
func (p *cutProxy) Cut(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = time.Now().Add(d)
	for c := range p.conns {
		c.Close()
	}
}

// Back says whether the proxy forwards again.
func (p *cutProxy) Back() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Now().After(p.refuse)
}

// TestOutboxCutAfterUpstream250 cuts the relay off its MySQL outbox for ten
// seconds right before the upstream answers 250 to a message, with hundreds
// of deliveries under way: the outcomes the relay cannot write wait in its
// journal, its leases hold, and once the database is back every message is
// acknowledged, none delivered twice.
func TestOutboxCutAfterUpstream250(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a relay and cuts its database")
	}
	dsn := migratedDatabase(t)
	head, rest, ok := strings.Cut(dsn, "tcp(")
	addr, tail, ok2 := strings.Cut(rest, ")")
	if !ok || !ok2 {
		t.Fatalf("the DSN %q names no tcp(host:port)", dsn)
	}
	proxy := startCutProxy(t, addr)
	bin := buildBinary(t)
	up := smtptest.Start(t, smtptest.Options{})

	// Deliveries wait until everything is submitted, so that the cut hits
	// deliveries only (a submission cut after its commit would be sent
	// again by the client, a duplicate that is not the relay's).
	const total, cutAt = 400, 150
	release := make(chan struct{})
	cut := make(chan struct{})
	var n atomic.Int64
	up.OnData(func(smtptest.Message) error {
		<-release
		if n.Add(1) == cutAt {
			proxy.Cut(10 * time.Second)
			close(cut)
		}
		return nil
	})
	p := startProcess(t, bin, t.TempDir(),
		[]string{"--smarthost", up.Addr, "--backend", "mysql", "--dsn", head + "tcp(" + proxy.Addr + ")" + tail, "--spool-store", "outbox"},
		[]string{"POSTINO_HOSTNAME=cut-relay"})

	ids := make([]string, total)
	for i := range ids {
		ids[i] = fmt.Sprintf("cut-%04d", i)
	}
	var sent atomic.Int64
	results := fleetLoad(t, func() []string { return []string{p.smtp} }, 8, ids, &sent)
	for id, o := range results {
		if o != acked {
			t.Fatalf("%s was not answered 250 with the database up", id)
		}
	}
	close(release)
	select {
	case <-cut:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the upstream got %d deliveries in 3 minutes, never reaching the cut at %d", n.Load(), cutAt)
	}
	cutTime := time.Now()

	// The outcomes reached during the cut wait in the journal.
	kept := 0
	waitFor(t, time.Minute, func() string { return "no outcome was kept in the journal during the cut" }, func() bool {
		kept = max(kept, metric(t, p.admin, "postino_outcomes_kept"))
		return kept > 0
	})
	waitFor(t, time.Minute, func() string { return "the proxy never came back" }, proxy.Back)
	back := time.Now()
	waitFor(t, 3*time.Minute, func() string {
		return fmt.Sprintf("%d of %d acknowledged, %d outcomes kept, upstream got %d",
			metric(t, p.admin, `postino_queue_messages{status="SENT-ACKNOWLEDGED"}`), total,
			metric(t, p.admin, "postino_outcomes_kept"), len(up.Messages()))
	}, func() bool {
		return metric(t, p.admin, `postino_queue_messages{status="SENT-ACKNOWLEDGED"}`) == total &&
			metric(t, p.admin, "postino_outcomes_kept") == 0
	})
	t.Logf("cut for 10s at delivery %d: up to %d outcomes kept in the journal; all %d acknowledged %s after the database came back (%s after the cut)",
		cutAt, kept, total, time.Since(back).Round(time.Millisecond), time.Since(cutTime).Round(time.Millisecond))

	times := deliveredTimes(up)
	dups := 0
	for _, id := range ids {
		switch n := times[id]; {
		case n == 0:
			t.Errorf("%s is acknowledged but the upstream never got it", id)
		case n > 1:
			dups++
			t.Errorf("%s delivered %d times", id, n)
		}
	}
	if len(times) != total {
		t.Errorf("the upstream got %d distinct messages, want %d", len(times), total)
	}
	t.Logf("duplicates: %d", dups)
}
