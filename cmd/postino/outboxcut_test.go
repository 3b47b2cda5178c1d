package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay/admin"
)

// cutProxy forwards MySQL connections to target until told to cut them:
// requests forwards the packets of the client c to the server s. Before
// it forwards the COMMIT whose reply LoseCommitReply asked to lose, it sets
// lose. The client sends a command only once it has the reply of the one
// before (the MySQL protocol), so the next reply is the COMMIT's.
func (p *cutProxy) requests(s, c net.Conn, lose *atomic.Bool) {
	r := bufio.NewReader(c)
	matched := false
	for {
		var head [4]byte
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return
		}
		packet := make([]byte, 4+(int(head[0])|int(head[1])<<8|int(head[2])<<16))
		copy(packet, head[:])
		if _, err := io.ReadFull(r, packet[4:]); err != nil {
			return
		}
		p.mu.Lock()
		matched = matched || p.loseAfter != nil && bytes.Contains(packet, p.loseAfter)
		p.mu.Unlock()
		switch cmd := string(packet[4:]); {
		case ends(cmd, "COMMIT") && matched:
			p.mu.Lock()
			if p.loseAfter != nil {
				p.loseAfter = nil
				lose.Store(true)
			}
			p.mu.Unlock()
			matched = false
		case ends(cmd, "COMMIT") || ends(cmd, "ROLLBACK"):
			matched = false
		}
		if _, err := s.Write(packet); err != nil {
			return
		}
	}
}

// ends reports whether the command cmd is a query that ends the
// transaction with word: alone, or as the last of its statements (the
// store sends COMMIT with the transaction's last writes).
func ends(cmd, word string) bool {
	return strings.HasPrefix(cmd, "\x03") && (cmd[1:] == word || strings.HasSuffix(cmd, ";\n"+word))
}

// replies writes the server's replies to the client until one is to be
// lost.
type replies struct {
	net.Conn
	lose *atomic.Bool
}

func (r replies) Write(b []byte) (int, error) {
	if r.lose.Load() {
		return 0, errors.New("the reply is lost (test)")
	}
	return r.Conn.Write(b)
}

// LoseCommitReply loses the reply of the next COMMIT of a transaction that
// sent a statement holding match: the database commits, and the client's
// connection is closed before the reply reaches it.
func (p *cutProxy) LoseCommitReply(match string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loseAfter = []byte(match)
}

// Cut closes every connection and refuses new ones for a while, as a
// database that drops off the network would; LoseCommitReply loses the
// reply of one COMMIT.
type cutProxy struct {
	Addr   string
	target string

	mu     sync.Mutex
	conns  map[net.Conn]bool
	refuse time.Time
	// loseAfter is what a statement holds whose transaction's COMMIT
	// loses its reply, until one has.
	loseAfter []byte
}

// startCutProxy starts a proxy in front of the MySQL server at target, and
// returns it with dsn (a database of that server) pointed at it.
func startCutProxy(t *testing.T, dsn string) (*cutProxy, string) {
	t.Helper()
	head, rest, ok := strings.Cut(dsn, "tcp(")
	target, tail, ok2 := strings.Cut(rest, ")")
	if !ok || !ok2 {
		t.Fatalf("the DSN %q names no tcp(host:port)", dsn)
	}
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
	return p, head + "tcp(" + p.Addr + ")" + tail
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
	end := func(dst, src net.Conn) {
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	var lose atomic.Bool
	go func() {
		p.requests(s, c, &lose)
		end(s, c)
	}()
	go func() {
		io.Copy(replies{c, &lose}, s)
		end(c, s)
	}()
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
	proxy, dsn := startCutProxy(t, migratedDatabase(t))
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
		[]string{"--smarthost", up.Addr, "--backend", "mysql", "--dsn", dsn, "--spool-store", "outbox"},
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

// TestCreateCommitReplyLost loses the reply of the COMMIT that makes a
// message's row, with the bytes in the spool: the client is answered 451,
// the relay not knowing whether the row landed, and the spool file stays,
// so that the row, which did land, is delivered from it. The app's retry is
// answered 250 for the message queued, and nothing is delivered twice.
func TestCreateCommitReplyLost(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a relay and cuts its database")
	}
	proxy, dsn := startCutProxy(t, migratedDatabase(t))
	bin := buildBinary(t)
	up := smtptest.Start(t, smtptest.Options{})
	p := startProcess(t, bin, t.TempDir(), []string{"--smarthost", up.Addr, "--backend", "mysql", "--dsn", dsn},
		[]string{"POSTINO_HOSTNAME=lost-reply"})
	send := func() (outcome, error) {
		c, err := smtp.Dial(p.smtp)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return submit(c, "lost-1")
	}

	// The statement that inserts the message rows (backends/mysql's
	// insertMessages).
	proxy.LoseCommitReply("INSERT INTO emails (id, status, eml_file_path")
	o, err := send()
	if se, ok := errors.AsType[*smtp.SMTPError](err); o != notKept || !ok || se.Code != 451 {
		t.Fatalf("the submission whose commit lost its reply: %v, want a 451", err)
	}
	live := &admin.Client{Base: p.admin}
	var m admin.Message
	waitFor(t, time.Minute, func() string {
		return fmt.Sprintf("lost-1 is %s (%s), not delivered from the file its row names", m.Status, m.Reason)
	}, func() bool {
		m, err = live.Get(context.Background(), "lost-1")
		return err == nil && m.Status == "SENT-ACKNOWLEDGED"
	})
	if o, err := send(); o != acked {
		t.Errorf("the app's retry: %v, want 250", err)
	}
	if n := deliveredTimes(up)["lost-1"]; n != 1 {
		t.Errorf("lost-1 delivered %d times, want once", n)
	}
}
