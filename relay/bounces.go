package relay

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/genropy/postino/relay/bounce"
	"github.com/genropy/postino/relay/mailbox"
)

// bounceMailboxes makes a poller per configured bounce mailbox, all
// recording through one recorder.
func (r *Relay) bounceMailboxes(bm *bounce.Metrics, m *mailbox.Metrics, wake func()) error {
	if len(r.cfg.Bounces.Mailboxes) == 0 {
		return nil
	}
	cfgs, err := mailboxConfigs("bounces.mailboxes", r.cfg.Bounces.Mailboxes, r.owner(), os.Getenv)
	if err != nil {
		return err
	}
	rc := bounce.RecorderConfig{Options: bounce.Options{BounceAddresses: r.cfg.BounceAddresses()}, Log: r.log, Metrics: bm, Wake: wake,
		Findings: r.policy, Brake: r.brake}
	// Set only when there is one: a nil pointer in an interface is not nil.
	if r.unsubscribes != nil {
		rc.Unsubscribes = r.unsubscribes
	}
	rec := bounce.NewRecorder(r.outbox, rc)
	for _, cfg := range cfgs {
		r.pollers = append(r.pollers, mailbox.New(cfg, r.outbox, rec, r.log, m))
	}
	return nil
}

// owner names this relay for the mailbox leases: the same across its
// restarts (so that a restarted relay takes its mailboxes back at once),
// another for another relay, even on the same host.
func (r *Relay) owner() string {
	return r.cfg.Hostname + "/" + r.smtpLn.Addr().String()
}

// runPollers watches the mailboxes until ctx ends.
func (r *Relay) runPollers(ctx context.Context, wg *sync.WaitGroup) {
	for _, p := range r.pollers {
		wg.Go(func() { p.Run(ctx) })
	}
}

// degraded lists the parts whose failure leaves mail flowing: plugins,
// mailboxes, message files that could not be read, routes whose upstream
// is down and the resolvers of MX delivery (the relay still takes their
// mail, which waits).
func (r *Relay) degraded() map[string]error {
	out := r.dispatcher.Ready()
	for name, err := range r.engine.RouteHealth() {
		out["route "+name] = err
	}
	if r.cfg.deliversToMX() {
		out["dns"] = r.engine.Resolution()
	}
	for _, p := range r.pollers {
		out["mailbox "+p.Name()] = p.Ready()
	}
	for _, rd := range r.submissions {
		out["submissions "+rd.Name()] = rd.Ready()
	}
	out["message files"] = r.unreadableFiles(time.Now())
	return out
}

// unreadableWindow is how long a message file that could not be read keeps
// the relay degraded: the message waits meanwhile, and its next attempt
// tells whether the file is back.
const unreadableWindow = 10 * time.Minute

// unreadableFiles says whether message files could not be read lately, and
// where the relay looked for the last one.
func (r *Relay) unreadableFiles(now time.Time) error {
	n, last := r.spool.Unreadable()
	if last == nil || now.Sub(last.At) > unreadableWindow {
		return nil
	}
	return fmt.Errorf("%d message file reads failed since start, the last at %s: %v; the messages wait and are tried again: "+
		"check that the spool's volume is mounted", n, last.At.UTC().Format(time.RFC3339), last.Err)
}
