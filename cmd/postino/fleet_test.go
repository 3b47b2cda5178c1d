package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay/admin"
)

// submit sends one message on c and says whether the relay kept it: a
// refusal or a cut before the final dot is notKept, a cut after it is
// ambiguous. c is unusable after an error that is not a refusal.
func submit(c *smtp.Client, id string) (outcome, error) {
	if err := c.Mail("app@example.com", nil); err != nil {
		return notKept, err
	}
	if err := c.Rcpt("user@example.net", nil); err != nil {
		return notKept, err
	}
	w, err := c.Data()
	if err != nil {
		return notKept, err
	}
	if _, err := fmt.Fprintf(w, "From: app@example.com\r\nX-Genro-Mail-ID: %s\r\nSubject: fleet\r\n\r\n%s", id, strings.Repeat("fleet test line\r\n", 50)); err != nil {
		return notKept, err
	}
	resp, err := w.CloseWithResponse()
	if err == nil && strings.Contains(resp.StatusText, "queued as "+id) {
		return acked, nil
	}
	if err == nil {
		return ambiguous, fmt.Errorf("250 without the id: %s", resp.StatusText)
	}
	var se *smtp.SMTPError
	if errors.As(err, &se) {
		return notKept, err
	}
	return ambiguous, err
}

// fleetLoad submits ids over clients concurrent sessions, spread over the
// relays addrs returns (read again at each reconnection, so a relay
// restarted on a new address is used). A message not kept is sent again,
// on the next relay; one whose fate is unknown is not, and counted. It
// returns what each id ended as.
func fleetLoad(t *testing.T, addrs func() []string, clients int, ids []string, sent *atomic.Int64) map[string]outcome {
	var (
		mu      sync.Mutex
		results = map[string]outcome{}
		wg      sync.WaitGroup
		queue   = make(chan string)
	)
	for w := range clients {
		wg.Go(func() {
			var c *smtp.Client
			defer func() {
				if c != nil {
					c.Close()
				}
			}()
			next := w
			for id := range queue {
				for tries := 0; ; tries++ {
					if tries > 200 {
						t.Errorf("%s: not kept after %d tries", id, tries)
						break
					}
					if c == nil {
						a := addrs()
						next++
						var err error
						if c, err = smtp.Dial(a[next%len(a)]); err != nil {
							c = nil
							time.Sleep(50 * time.Millisecond) // a pause between tries, not a proof
							continue
						}
					}
					o, err := submit(c, id)
					if o != notKept {
						mu.Lock()
						results[id] = o
						mu.Unlock()
						sent.Add(1)
						if err != nil {
							c.Close()
							c = nil
						}
						break
					}
					var se *smtp.SMTPError
					if errors.As(err, &se) && c.Reset() == nil {
						time.Sleep(50 * time.Millisecond) // a pause between tries, not a proof
						continue
					}
					c.Close()
					c = nil
				}
			}
		})
	}
	for _, id := range ids {
		queue <- id
	}
	close(queue)
	wg.Wait()
	return results
}

// waitFor polls done until it is true, failing the test after limit.
func waitFor(t *testing.T, limit time.Duration, what func() string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", limit, what())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// heldBy returns the messages of the outbox, in a working status, that
// owner held at the time at (heldAt). It reads them a few at once: it races
// with the restore of the dead relay's leases, and a message restored
// before it is read is not found.
func heldBy(t *testing.T, c *admin.Client, owner string, at time.Time) []string {
	t.Helper()
	all := listAll(t, c)
	ids := make(chan string, len(all))
	for id, m := range all {
		if backends.Status(m.Status).Working() {
			ids <- id
		}
	}
	close(ids)
	var (
		mu  sync.Mutex
		out []string
		wg  sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for id := range ids {
				m, err := c.Get(context.Background(), id)
				if err != nil {
					t.Error(err)
					continue
				}
				if heldAt(m, owner, at) {
					mu.Lock()
					out = append(out, id)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return out
}

// heldAt says whether owner held m (read with its history) at the time at:
// its last change before then was owner's claim.
func heldAt(m admin.Message, owner string, at time.Time) bool {
	held := false
	for _, h := range m.History {
		if !h.At.Before(at) {
			break
		}
		held = backends.Status(h.Status).Working() && strings.HasSuffix(h.Reason, " by "+owner)
	}
	return held
}

// takenOver returns when m, held by a relay killed at the time killed, was
// taken over (its first change since that is no restore: a claim, or an
// outcome) and when it was SENT, as its history says.
func takenOver(m admin.Message, killed time.Time) (claimed, sent time.Time) {
	for _, h := range m.History {
		st := backends.Status(h.Status)
		if claimed.IsZero() && h.At.After(killed) && st != backends.StatusAccepted && st != backends.StatusReady {
			claimed = h.At
		}
		if st == backends.StatusSent {
			sent = h.At
		}
	}
	return claimed, sent
}

// history is m's history on one line, for a failure's message.
func history(m admin.Message) string {
	var b strings.Builder
	for _, h := range m.History {
		fmt.Fprintf(&b, "%s %s (%s); ", h.At.Format("15:04:05.000"), h.Status, h.Reason)
	}
	return b.String()
}

// deliveredTimes counts the messages the upstream got by id.
func deliveredTimes(up *smtptest.Server) map[string]int {
	times := map[string]int{}
	for _, m := range up.Messages() {
		times[m.Header("X-Genro-Mail-ID")]++
	}
	return times
}

// TestFleetKillMySQL runs the fleet of runFleetKill on a MySQL outbox.
func TestFleetKillMySQL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three relays and kills one")
	}
	runFleetKill(t, []string{"--backend", "mysql", "--dsn", migratedDatabase(t)}, nil)
}

// TestFleetKillDynamoDB runs the fleet of runFleetKill on a DynamoDB Local
// table.
func TestFleetKillDynamoDB(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three relays and kills one")
	}
	env := dynamoDBEnv(t)
	runFleetKill(t, []string{"--backend", "dynamodb", "--table", dynamoDBTable(t, "fleet")}, env)
}

// runFleetKill runs three relays that share nothing but the outbox that
// store (its flags, and env for the relays' environment) holds, the bytes
// too, kills one with SIGKILL under load and restarts it on a new empty
// data directory: every message answered 250 is delivered, only those the
// dead relay was delivering may go twice, and the others take its claims
// over once their lease (a minute) is up: within three minutes, since on a
// loaded machine (DynamoDB Local sharing two cores with a second test run)
// the claims that find them came 100 s after the kill.
func runFleetKill(t *testing.T, store, env []string) {
	bin := buildBinary(t)
	up := smtptest.Start(t, smtptest.Options{})
	up.Hang(200 * time.Millisecond) // deliveries take a while, so that the kill cuts some
	// At the kill the upstream holds the end of DATA until released: more
	// held than two relays have sessions means relay-2 is delivering too.
	var (
		holding atomic.Bool
		inData  atomic.Int64
		release = make(chan struct{})
	)
	up.OnData(func(smtptest.Message) error {
		if holding.Load() {
			inData.Add(1)
			<-release
		}
		return nil
	})
	var released sync.Once
	releaseData := func() { released.Do(func() { holding.Store(false); close(release) }) }
	t.Cleanup(releaseData)
	const sessions = 20 // a relay's connections to the smarthost: routes.default.max_connections
	args := append([]string{"--smarthost", up.Addr, "--spool-store", "outbox"}, store...)
	start := func(name string) *process {
		return startProcess(t, bin, t.TempDir(), args, append([]string{"POSTINO_HOSTNAME=" + name}, env...))
	}
	var (
		mu     sync.Mutex
		relays = []*process{start("relay-1"), start("relay-2"), start("relay-3")}
	)
	addrs := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, p := range relays {
			if p != nil {
				out = append(out, p.smtp)
			}
		}
		return out
	}
	live := &admin.Client{Base: relays[0].admin}

	const total = 3000
	ids := make([]string, total)
	for i := range ids {
		ids[i] = fmt.Sprintf("fleet-%05d", i)
	}
	var sent atomic.Int64
	loadDone, loadEnded := make(chan map[string]outcome, 1), make(chan struct{})
	began := time.Now()
	go func() { defer close(loadEnded); loadDone <- fleetLoad(t, addrs, 12, ids, &sent) }()
	// A test that stops early waits for its load, which reports to it,
	// before the relays stop.
	t.Cleanup(func() { <-loadEnded })

	// Kill relay-2 once a third is submitted and deliveries are flowing,
	// in the middle of some of them.
	waitFor(t, 3*time.Minute, func() string {
		return fmt.Sprintf("%d submitted, %d delivered; want %d and %d before the kill", sent.Load(), len(up.Messages()), total/3, total/10)
	}, func() bool { return sent.Load() >= total/3 && len(up.Messages()) >= total/10 })
	holding.Store(true)
	holdFrom := time.Now()
	waitFor(t, time.Minute, func() string {
		return fmt.Sprintf("%d deliveries in DATA; want more than %d", inData.Load(), 2*sessions)
	}, func() bool { return inData.Load() > 2*sessions })
	victim := relays[1]
	victim.cmd.Process.Signal(syscall.SIGKILL)
	killedAt := time.Now()
	atKill := fmt.Sprintf("%s in: %d submitted, %d delivered, %d in DATA (held there for %s)", killedAt.Sub(began).Round(time.Second),
		sent.Load(), len(up.Messages()), inData.Load(), killedAt.Sub(holdFrom).Round(time.Millisecond))
	victim.cmd.Wait()
	releaseData()
	mu.Lock()
	relays[1] = nil
	mu.Unlock()
	held := heldBy(t, live, "relay-2", killedAt)
	t.Logf("relay-2 killed %s; it held %d messages (found in %s)", atKill, len(held), time.Since(killedAt).Round(time.Millisecond))
	if len(held) == 0 {
		t.Error("the killed relay held no message: the kill proved nothing")
	}
	restarted := start("relay-2")
	mu.Lock()
	relays[1] = restarted
	mu.Unlock()

	// The others (or the new relay-2) take its claims over and deliver
	// them; when, each message's history says. Each look reads up to the
	// first message not SENT yet: the store serves the relays, not the
	// test's reads.
	pending := slices.Clone(held)
	var takeover, delivered time.Duration
	waitFor(t, 5*time.Minute, func() string {
		return fmt.Sprintf("%d of the dead relay's %d messages not SENT yet", len(pending), len(held))
	}, func() bool {
		for len(pending) > 0 {
			m, err := live.Get(context.Background(), pending[0])
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(m.Status, "SENT") {
				return false
			}
			claimed, sent := takenOver(m, killedAt)
			takeover, delivered = max(takeover, claimed.Sub(killedAt)), max(delivered, sent.Sub(killedAt))
			pending = pending[1:]
		}
		return true
	})
	t.Logf("take-over: the %d messages relay-2 held were claimed again %s after the kill, all SENT after %s",
		len(held), takeover.Round(time.Millisecond), delivered.Round(time.Millisecond))
	if takeover > 3*time.Minute {
		t.Errorf("take-over took %s, over three minutes: the claims should find a dead relay's messages once their lease is up", takeover)
	}

	results := <-loadDone
	counts := map[outcome]int{}
	for _, o := range results {
		counts[o]++
	}
	t.Logf("submitted in %s: %d answered 250, %d with no reply after the final dot", time.Since(began).Round(time.Second), counts[acked], counts[ambiguous])

	// Every row ends acknowledged: the counts say when, the listing
	// checks.
	var kept map[string]admin.Message
	waitFor(t, 5*time.Minute, func() string { return fmt.Sprintf("%d rows, not all SENT-ACKNOWLEDGED", len(kept)) }, func() bool {
		if metric(t, live.Base, `postino_queue_messages{status="SENT-ACKNOWLEDGED"}`) < counts[acked] {
			return false
		}
		kept = listAll(t, live)
		for _, m := range kept {
			if m.Status != "SENT-ACKNOWLEDGED" {
				return false
			}
		}
		return len(kept) >= counts[acked]
	})
	t.Logf("all acknowledged %s after the first submission", time.Since(began).Round(time.Second))
	times := deliveredTimes(up)
	dups, heldDups := 0, 0
	for id, o := range results {
		_, ok := kept[id]
		switch n := times[id]; {
		case o == acked && !ok:
			t.Errorf("%s was answered 250 but is not in the outbox", id)
		case ok && n == 0:
			t.Errorf("%s is acknowledged but the upstream never got it", id)
		case n > 1:
			dups++
			m, err := live.Get(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if !heldAt(m, "relay-2", killedAt) {
				t.Errorf("%s delivered %d times but the dead relay did not hold it at the kill: %s", id, n, history(m))
				continue
			}
			heldDups++
			t.Logf("%s delivered %d times; relay-2 held it at the kill", id, n)
		}
	}
	for id := range times {
		if _, ok := results[id]; !ok {
			t.Errorf("the upstream got %s, which was never submitted", id)
		}
	}
	t.Logf("%d rows, all SENT-ACKNOWLEDGED; %d duplicates, %d of them held by relay-2 at the kill", len(kept), dups, heldDups)
}
