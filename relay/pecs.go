package relay

import (
	"context"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/relay/mailbox"
	"github.com/genropy/postino/relay/pec"
)

// overdueEvery is how often late PEC receipts are looked for: every
// minute, or a tenth of the shortest limit when that is shorter, so that a
// receipt is not reported much later than its limit says.
func (c *PECConfig) overdueEvery() time.Duration {
	return max(min(time.Minute, c.AcceptanceTimeout.D()/10, c.DeliveryTimeout.D()/10), 10*time.Millisecond)
}

// pecMailboxes makes a poller per PEC account, all recording receipts
// through one recorder.
func (r *Relay) pecMailboxes(reg prometheus.Registerer, m *mailbox.Metrics, wake func()) error {
	if len(r.cfg.PEC.Accounts) == 0 {
		return nil
	}
	roots, err := r.cfg.PEC.roots()
	if err != nil {
		return err
	}
	if roots == nil {
		r.log.Warn("pec.trust_bundle is not set: receipts' signatures are not checked, and their events say so")
	}
	cfgs, err := mailboxConfigs("pec.accounts", r.cfg.PEC.mailboxes(), r.owner(), os.Getenv)
	if err != nil {
		return err
	}
	r.pecRecorder = pec.NewRecorder(r.outbox, r.bodies, pec.Options{Roots: roots}, r.log, pec.NewMetrics(reg), wake)
	for _, cfg := range cfgs {
		r.pollers = append(r.pollers, mailbox.New(cfg, r.outbox, r.pecRecorder, r.log, m))
	}
	return nil
}

// watchOverdue raises the events of late PEC receipts until ctx ends. It
// runs apart from housekeeping, so that a slow store for one does not hold
// up the other.
func (r *Relay) watchOverdue(ctx context.Context) {
	tick := time.NewTicker(r.cfg.PEC.overdueEvery())
	defer tick.Stop()
	limits := pec.Limits{Acceptance: r.cfg.PEC.AcceptanceTimeout.D(), Delivery: r.cfg.PEC.DeliveryTimeout.D()}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := r.pecRecorder.CheckOverdue(ctx, time.Now().UTC(), limits); err != nil {
				r.log.Error("pec: some late receipts could not be looked for; will retry", "error", err)
			}
		}
	}
}
