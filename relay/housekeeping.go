package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/spool"
)

const (
	// orphanGrace protects the files other relays sharing the spool are
	// writing: only an exclusive outbox can sweep younger orphans.
	orphanGrace      = time.Hour
	purgeChunk       = 500
	retentionEvery   = 10 * time.Minute
	restoreEveryPart = 4 // restore runs this many times per lease
)

// recover returns the leases a dead process held, before the listeners
// open: they are few (a relay holds at most its in-flight messages), and
// the workers must find those messages where they were.
func (r *Relay) recover(ctx context.Context) error {
	expiredBefore := r.started
	if r.exclusive {
		// Nobody else holds leases on this outbox: all are the dead
		// process's, whatever their expiry.
		expiredBefore = time.Unix(1<<40, 0)
	}
	n, err := r.outbox.Restore(ctx, expiredBefore)
	if err != nil {
		return fmt.Errorf("start-up restore: %w", err)
	}
	if n > 0 {
		r.log.Info("start-up: returned messages held by the previous run", "count", n)
	}
	return nil
}

// sweep removes, in the background, the spool files a crash left without
// a row (the crash came before the commit, so no 250 was given). Mail is
// accepted meanwhile: however many files the spool holds, the sweep never
// keeps the SMTP listener closed. Rows are never changed because of a file
// this relay cannot see: a missing mount looks the same as a lost file.
func (r *Relay) sweep(ctx context.Context) {
	if err := r.sweepSpool(ctx); err != nil && ctx.Err() == nil {
		r.log.Error("start-up sweep of the spool stopped; the next start sweeps again", "error", err)
	}
}

// sweepSpool removes the spool files no row points to. The files of this
// run are left alone (their rows may be on their way), and on a shared
// outbox those of the last hour too (other relays' may be).
func (r *Relay) sweepSpool(ctx context.Context) error {
	removed := 0
	err := r.spool.Walk(func(e spool.Entry) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !e.ModTime.Before(r.started) || !r.exclusive && r.started.Sub(e.ModTime) < orphanGrace {
			return nil
		}
		m, err := r.outbox.Get(ctx, e.ID)
		switch {
		case errors.Is(err, backends.ErrNotFound):
		case err != nil:
			return err
		case m.EmlPath == e.Path:
			return nil
		}
		if err := r.spool.Remove(e.Path); err != nil {
			return err
		}
		removed++
		return nil
	})
	if removed > 0 {
		r.log.Info("start-up sweep: removed spool files of messages never acknowledged to the client", "count", removed)
	}
	return err
}

// housekeeping restores expired leases and applies retention until ctx ends.
func (r *Relay) housekeeping(ctx context.Context) {
	restore := time.NewTicker(r.cfg.Intake.Lease.D() / restoreEveryPart)
	defer restore.Stop()
	retention := time.NewTicker(retentionEvery)
	defer retention.Stop()
	r.purge(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-restore.C:
			n, err := r.outbox.Restore(ctx, time.Now().UTC())
			if err != nil {
				r.log.Error("restore of expired leases failed; will retry", "error", err)
			} else if n > 0 {
				r.log.Warn("returned messages whose lease expired", "count", n)
				r.worker.Wake()
			}
		case <-retention.C:
			r.purge(ctx)
		}
	}
}

// purge removes acknowledged messages older than the retention period: the
// rows first, then their files, so that a crash in between leaves only
// orphan files, which the next start sweeps. The counts per minute older
// than the outbox keeps them (backends.MinutesKept) go too.
func (r *Relay) purge(ctx context.Context) {
	cutoff := time.Now().UTC().Add(-r.cfg.Retention.D())
	total := 0
	for ctx.Err() == nil {
		msgs, err := r.outbox.Purge(ctx, cutoff, purgeChunk)
		if err != nil {
			r.log.Error("retention: purge failed; will retry", "error", err)
			return
		}
		for _, m := range msgs {
			// Bytes and receipts the outbox kept went with the row: for
			// those, this removes only receipts an earlier relay kept
			// beside them in its spool.
			if err := r.spool.Remove(m.EmlPath); err != nil {
				r.log.Warn("retention: cannot remove spool file", "id", m.ID, "error", err)
			}
		}
		total += len(msgs)
		if len(msgs) < purgeChunk {
			break
		}
	}
	if total > 0 {
		r.log.Info("retention: removed acknowledged messages", "count", total, "older_than", cutoff)
	}
	if err := r.spool.PruneBuckets(time.Now().Add(-10 * time.Minute)); err != nil {
		r.log.Warn("retention: cannot prune spool buckets", "error", err)
	}
	if err := r.outbox.PruneMinutes(ctx, time.Now().Add(-backends.MinutesKept)); err != nil {
		r.log.Warn("retention: cannot prune the counts per minute; will retry", "error", err)
	}
	r.pruneSuppressions(ctx)
}

// pruneSuppressions removes the suppression entries that expired, page by
// page: they block nothing already, and would stay in the counts and the
// lists. Their history keeps an expired row each.
func (r *Relay) pruneSuppressions(ctx context.Context) {
	total := 0
	for ctx.Err() == nil {
		n, err := r.outbox.PruneSuppressions(ctx, time.Now().UTC(), purgeChunk)
		if err != nil {
			r.log.Warn("retention: cannot prune the expired suppression entries; will retry", "error", err)
			return
		}
		total += n
		if n < purgeChunk {
			break
		}
	}
	if total > 0 {
		r.log.Info("retention: removed expired suppression entries", "count", total)
	}
}

// parkedScrapeLimit bounds the work of one scrape; past it the gauge stays at
// the limit, which is already far beyond any alert threshold.
const parkedScrapeLimit = 10000

// queueCollector reports the queue depth by status and the parked events at
// scrape time, so that the figures come from the store every relay shares.
type queueCollector struct {
	outbox queueCounts
	desc   *prometheus.Desc
	parked *prometheus.Desc
}

// queueCounts is what the collector reads of the outbox.
type queueCounts interface {
	Counts(ctx context.Context) (map[backends.Status]int, error)
	EventsByState(ctx context.Context, state backends.EventState, limit int) ([]*backends.Event, error)
}

func newQueueCollector(o queueCounts) *queueCollector {
	return &queueCollector{outbox: o,
		desc: prometheus.NewDesc("postino_queue_messages",
			"Messages in the outbox, by status.", []string{"status"}, nil),
		parked: prometheus.NewDesc("postino_events_parked",
			fmt.Sprintf("Events parked after their tries ran out, waiting for postino events replay (counted up to %d).", parkedScrapeLimit), nil, nil)}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc; ch <- c.parked }

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.outbox.Counts(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for _, st := range backends.Statuses() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[st]), string(st))
	}
	parked, err := c.outbox.EventsByState(ctx, backends.EventParked, parkedScrapeLimit)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.parked, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, float64(len(parked)))
}
