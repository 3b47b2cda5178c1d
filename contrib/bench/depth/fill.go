package main

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/outcome"
)

const (
	heldBatch = "depth-held"
	route     = "default"
	rcpt      = "user@example.net"
	// spread is how far back the messages were created: within the
	// retention period, so that the relay's purge keeps them.
	spread = 24 * time.Hour
)

// filler fills the outbox as a day of traffic with a slow upstream leaves
// it: most messages READY and deferred for hours after a failed attempt,
// some acknowledged (SENT, FAILED), and a suspended batch whose messages are
// due and first in claim order, so that every claim must step over them.
type filler struct {
	o        options
	outbox   backends.Outbox
	spoolDir string
	now      time.Time
	body     string

	dirs sync.Map // spool buckets made
}

type kind int

const (
	kindHeld kind = iota
	kindDeferred
	kindSent
	kindFailed
)

func (f *filler) kindOf(i int) kind {
	switch {
	case i < f.o.held:
		return kindHeld
	case i%100 < 10:
		return kindSent
	case i%100 < 12:
		return kindFailed
	}
	return kindDeferred
}

func (f *filler) fill(ctx context.Context) error {
	if err := f.outbox.SuspendBatch(ctx, heldBatch); err != nil {
		return err
	}
	f.body = strings.Repeat(strings.Repeat("x", 76)+"\r\n", max(1, f.o.bodySize/78))
	ctx, cancel := context.WithTimeout(ctx, f.o.maxFill)
	defer cancel()
	var next, done atomic.Int64
	errc := make(chan error, f.o.workers)
	var wg sync.WaitGroup
	start := time.Now()
	for range f.o.workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= f.o.n {
					return
				}
				if err := f.one(ctx, i); err != nil {
					errc <- err
					cancel()
					return
				}
				done.Add(1)
			}
		})
	}
	stopProgress := f.progress(&done, start)
	wg.Wait()
	stopProgress()
	rate := float64(done.Load()) / time.Since(start).Seconds()
	// Past -max-fill the workers fail on the deadline: say that, with the rate.
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("fill given up after %s (-max-fill) at %d of %d messages: %.0f msg/s", time.Since(start).Round(time.Second), done.Load(), f.o.n, rate)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("fill stopped after %d messages: %w", done.Load(), err)
	default:
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	fmt.Printf("filled %d messages in %s = %.0f msg/s (%d workers, spool files: %v)\n", f.o.n, time.Since(start).Round(100*time.Millisecond), rate, f.o.workers, f.o.files)
	return nil
}

// progress prints the fill's rate every 10 seconds until stopped.
func (f *filler) progress(done *atomic.Int64, start time.Time) func() {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				n := done.Load()
				rate := float64(n) / time.Since(start).Seconds()
				fmt.Printf("  fill: %d of %d, %.0f msg/s, about %s to go\n", n, f.o.n, rate,
					(time.Duration(float64(f.o.n-int(n))/rate) * time.Second).Round(time.Second))
			}
		}
	})
	return func() { close(stop); wg.Wait() }
}

// one creates message i, with its spool file, and moves it where its kind
// leaves it, through the store's Create and Transition as the relay would.
func (f *filler) one(ctx context.Context, i int) error {
	r := rand.New(rand.NewPCG(uint64(i), 16))
	k := f.kindOf(i)
	created := f.now.Add(-spread + time.Duration(float64(spread)*float64(i)/float64(f.o.n)))
	m := &backends.Message{
		ID:        uuid(),
		Priority:  priority(r),
		Reason:    "accepted from 127.0.0.1",
		CreatedAt: created,
		Envelope: backends.Envelope{Sender: "app@example.com", Recipients: []string{rcpt},
			ClientAddr: "127.0.0.1:40000", Helo: "app.local", ReceivedAt: created},
	}
	m.MessageID = m.ID + "@app.example.com"
	if k == kindHeld {
		m.Batch, m.Priority = heldBatch, backends.PriorityHigh
		m.Envelope.Control = map[string]string{"X-Postino-Batch": heldBatch}
	}
	if err := f.spoolFile(m); err != nil {
		return err
	}
	if err := f.outbox.Create(ctx, m); err != nil {
		return fmt.Errorf("create %s: %w", m.ID, err)
	}
	t := f.path(m, k, r)
	if err := f.outbox.Transition(ctx, t); err != nil {
		return fmt.Errorf("move %s to %s: %w", m.ID, t.Final(), err)
	}
	return nil
}

// priority draws 5 % immediate, 20 % high, 60 % normal, 15 % low.
func priority(r *rand.Rand) int {
	switch n := r.IntN(100); {
	case n < 5:
		return backends.PriorityImmediate
	case n < 25:
		return backends.PriorityHigh
	case n < 85:
		return backends.PriorityNormal
	}
	return backends.PriorityLow
}

// path is the one transition that takes the new message through intake and
// an attempt, as the relay's workers would in several.
func (f *filler) path(m *backends.Message, k kind, r *rand.Rand) backends.Transition {
	at := m.CreatedAt.Add(time.Second)
	t := backends.Transition{ID: m.ID, From: backends.StatusAccepted, To: backends.StatusIntaking, At: at,
		LeaseUntil: at.Add(5 * time.Minute), Reason: "claimed for intake by relay", Route: route,
		Then: []backends.Step{{To: backends.StatusReady, Reason: "ready for route " + route}}}
	if k == kindHeld {
		return t
	}
	t.AddAttempt = true
	t.Then = append(t.Then, backends.Step{To: backends.StatusProcessing, Reason: "claimed for delivery by relay"})
	res := outcome.Recipient{Address: rcpt, Host: "smtp.example.net", At: at}
	switch k {
	case kindSent:
		res.Status, res.Code, res.EnhancedCode, res.Text = outcome.RecipientSent, 250, "2.0.0", "Ok: queued"
		why := "delivered to 1 of 1 recipients via " + route
		t.Then = append(t.Then, backends.Step{To: backends.StatusSent, Reason: why},
			backends.Step{To: backends.StatusCallingSent, Reason: "no plugin is configured"},
			backends.Step{To: backends.StatusSentAcknowledged, Reason: "no plugin is configured"})
	case kindFailed:
		res.Status, res.Code, res.EnhancedCode, res.Text = outcome.RecipientFailed, 550, "5.1.1", "User unknown"
		t.Then = append(t.Then, backends.Step{To: backends.StatusFailed, Reason: "550 5.1.1 User unknown"},
			backends.Step{To: backends.StatusCallingFailed, Reason: "no plugin is configured"},
			backends.Step{To: backends.StatusFailedAcknowledged, Reason: "no plugin is configured"})
	default:
		// Deferred: due again in one to six hours.
		due := f.now.Add(time.Hour + time.Duration(r.Int64N(int64(5*time.Hour))))
		res.Status, res.Code, res.EnhancedCode, res.Text = outcome.RecipientPending, 451, "4.7.1", "Try again later"
		t.DueAt = due
		t.Then = append(t.Then, backends.Step{To: backends.StatusReady,
			Reason: "451 4.7.1 Try again later; next attempt at " + due.Format(time.RFC3339)})
	}
	t.Results = []outcome.Recipient{res}
	return t
}

// spoolFile writes the message's file where intake would (spool/
// YYYYMMDD/HHMM/<id>.<nonce>.eml, by its creation minute), without the
// fsyncs that make intake's durable: the fill is a fixture.
func (f *filler) spoolFile(m *backends.Message) error {
	bucket := m.CreatedAt.Format("20060102/1504")
	m.EmlPath = filepath.Join(bucket, m.ID+"."+nonce()+".eml")
	headers := fmt.Sprintf("X-Genro-Mail-ID: %s\r\nMessage-ID: <%s>\r\nDate: %s\r\nFrom: app@example.com\r\nTo: %s\r\nSubject: depth %s\r\n\r\n",
		m.ID, m.MessageID, m.CreatedAt.Format(time.RFC1123Z), rcpt, m.ID)
	m.Envelope.Size = int64(len(headers) + len(f.body))
	if !f.o.files {
		return nil
	}
	dir := filepath.Join(f.spoolDir, bucket)
	if _, ok := f.dirs.Load(dir); !ok {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return err
		}
		f.dirs.Store(dir, true)
	}
	return os.WriteFile(filepath.Join(f.spoolDir, m.EmlPath), []byte(headers+f.body), 0o640)
}

func uuid() string {
	var b [16]byte
	crand.Read(b[:])
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func nonce() string {
	var b [6]byte
	crand.Read(b[:])
	return hex.EncodeToString(b[:])
}
