package relay_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/genropy/postino/internal/testrig/smtptest"
	"github.com/genropy/postino/relay/admin"
	"github.com/genropy/postino/relay/brake"
)

// bulkMessage is one message of a load: its id, recipient and control
// header fields.
type bulkMessage struct{ id, rcpt, header string }

// submitAll sends the messages over conns sessions at once, each session
// reused from message to message, as an app sending a campaign does.
func submitAll(t *testing.T, addr string, conns int, msgs []bulkMessage) {
	t.Helper()
	work := make(chan bulkMessage)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			var c *smtp.Client
			defer func() {
				if c != nil {
					c.Close()
				}
			}()
			for m := range work {
				var err error
				if c == nil {
					if c, err = smtp.Dial(addr); err != nil {
						t.Error(err)
						continue
					}
				}
				msg := fmt.Sprintf("From: app@example.com\r\nTo: %s\r\nX-Genro-Mail-ID: %s\r\n%sSubject: load\r\n\r\nbody\r\n", m.rcpt, m.id, m.header)
				if err := c.SendMail("app@example.com", []string{m.rcpt}, strings.NewReader(msg)); err != nil {
					t.Errorf("%s: %v", m.id, err)
					c.Close()
					c = nil
				}
			}
		})
	}
	for _, m := range msgs {
		work <- m
	}
	close(work)
	wg.Wait()
}

// waitBatch waits until the batch is as ok says, and returns it.
func waitBatch(t *testing.T, c *admin.Client, code string, ok func(admin.Batch) bool) admin.Batch {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		b, err := c.Batch(context.Background(), code)
		if err == nil && ok(b) {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("batch %s: %+v (%v)", code, b, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBrakeStopsBadBatch sends a campaign of 1,000 messages whose list is
// one tenth bad (the upstream refuses those recipients 550 5.1.1), beside
// another batch and transactional mail, with the brake's defaults: the
// campaign stops itself soon after its first 200 recipients, the plugins
// are told once, and the other mail all goes.
//
// The brake counts once a second, and stops only what is not yet in
// flight: what the relay sends in that second and what it holds add to
// the 200. The route sends 100 messages a second, as a campaign would be
// paced, and delivery.max_in_flight is 25 (not 512), so that those stay
// small on a fast machine as on a loaded one.
func TestBrakeStopsBadBatch(t *testing.T) {
	const campaign, inFlight = 1000, 25
	cfg, up := testConfig(t)
	out := testPlugin(t, &cfg, "ok", nil)
	cfg.Delivery.MaxInFlight, cfg.Routes.Default.Rate = inFlight, 100
	var mu sync.Mutex
	tried, again := map[string]time.Time{}, 0
	up.OnRcpt(func(to string) error {
		if strings.HasPrefix(to, "camp-") {
			mu.Lock()
			if _, ok := tried[to]; ok {
				again++
			} else {
				tried[to] = time.Now()
			}
			mu.Unlock()
		}
		if strings.HasSuffix(to, "@bad.example") {
			return smtptest.Reply(550, smtp.EnhancedCode{5, 1, 1}, "no such user")
		}
		return nil
	})
	rl := start(t, cfg)

	// The other mail is spread through the campaign, as it would come.
	var msgs, otherMsgs []bulkMessage
	for i := range campaign {
		domain := "example.net"
		if i%10 == 5 {
			domain = "bad.example"
		}
		msgs = append(msgs, bulkMessage{fmt.Sprintf("camp-%04d", i), fmt.Sprintf("camp-%04d@%s", i, domain), "X-Postino-Batch: camp\r\n"})
		if i%10 == 0 {
			otherMsgs = append(otherMsgs,
				bulkMessage{fmt.Sprintf("good-%04d", i/10), fmt.Sprintf("good-%04d@example.org", i/10), "X-Postino-Batch: good\r\n"},
				bulkMessage{fmt.Sprintf("tx-%04d", i/10), fmt.Sprintf("tx-%04d@example.org", i/10), ""})
			msgs = append(msgs, otherMsgs[len(otherMsgs)-2:]...)
		}
	}
	began := time.Now()
	submitAll(t, rl.r.SMTPAddr().String(), 16, msgs)
	t.Logf("%d messages submitted in %s", len(msgs), time.Since(began).Round(time.Millisecond))

	// Waited for until it trips, or the whole campaign went.
	b := waitBatch(t, rl.client, "camp", func(b admin.Batch) bool {
		return b.Tripped != "" || b.Progress.Sent+b.Progress.Failed == campaign
	})
	if b.Tripped == "" {
		t.Fatalf("the whole campaign went, the brake never tripped: %+v", b)
	}
	if !b.Suspended || !strings.HasPrefix(b.Tripped, "suspended by the brake: hard verdicts") || !strings.Contains(b.Tripped, "over the 5.0% threshold") || b.TrippedAt == nil {
		t.Errorf("tripped batch %+v", b)
	}
	for _, m := range otherMsgs {
		waitStatus(t, rl.client, m.id, "SENT-ACKNOWLEDGED")
	}
	if good, err := rl.client.Batch(context.Background(), "good"); err != nil || good.Suspended || good.Tripped != "" || good.Progress.Sent != len(otherMsgs)/2 {
		t.Errorf("the other batch: %+v (%v)", good, err)
	}
	// What the relay held of the campaign when it stopped is handed back:
	// nothing of it is in flight or waiting to be claimed once it settles.
	b = waitBatch(t, rl.client, "camp", func(b admin.Batch) bool {
		p := b.Progress
		return p.InFlight == 0 && p.Waiting == 0 && p.Sent+p.Failed+p.Held == campaign
	})
	mu.Lock()
	n, after := len(tried), 0
	for _, at := range tried {
		if at.After(*b.TrippedAt) {
			after++
		}
	}
	mu.Unlock()
	t.Logf("the campaign stopped after %d of its %d messages were tried (%d sent, %d refused; %d of them after the trip), in %s; "+
		"the brake counted %d sent, %d hard: %s", n, campaign, b.Progress.Sent, b.Progress.Failed, after,
		time.Since(began).Round(time.Millisecond), b.Brake.Sent, b.Brake.Hard, b.Tripped)
	if n < int(b.Brake.MinSent) || n > campaign/2 || n != b.Progress.Sent+b.Progress.Failed {
		t.Errorf("%d of the campaign's messages were tried, %d sent and %d failed: want the brake to stop it soon after %d", n,
			b.Progress.Sent, b.Progress.Failed, b.Brake.MinSent)
	}
	// After the trip go those in flight, and at worst those of a claim
	// that was on its way: max_in_flight bounds each.
	if after > 2*inFlight || again != 0 {
		t.Errorf("%d of the campaign's messages were tried after the trip, more than twice max_in_flight (%d); %d were tried twice", after, inFlight, again)
	}

	var suspended []string
	deadline := time.Now().Add(30 * time.Second)
	for len(suspended) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		suspended = suspendedEvents(t, out)
	}
	if len(suspended) == 0 {
		t.Fatal("the plugin heard no BATCH-SUSPENDED event")
	}
	// Acknowledged: the plugin has heard all it will of it.
	ev := waitMessage(t, rl.client, suspended[0], func(m admin.Message) bool {
		for _, e := range m.Events {
			if e.Outcome == brake.EventSuspended {
				return e.State == "acked"
			}
		}
		return false
	})
	if got := suspendedEvents(t, out); len(got) != 1 || ev.Batch != "camp" {
		t.Errorf("the plugin heard BATCH-SUSPENDED on %v (message of batch %q), want once, on a message of camp", got, ev.Batch)
	}
}

// suspendedEvents are the messages the plugin heard a BATCH-SUSPENDED on.
func suspendedEvents(t *testing.T, out string) []string {
	var ids []string
	for _, e := range received(t, out) {
		if e.Outcome == brake.EventSuspended {
			ids = append(ids, e.MessageID)
		}
	}
	return ids
}
