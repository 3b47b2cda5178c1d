package intake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-message"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/claimloop"
	"github.com/genropy/postino/internal/lease"
	"github.com/genropy/postino/outcome"
)

// maxMIMEDepth bounds nested multiparts: deeper is an attack or a bug.
const maxMIMEDepth = 32

// WorkerStore is what the intake worker needs of the outbox.
type WorkerStore interface {
	Claim(ctx context.Context, c backends.Claim) ([]*backends.Message, error)
	Transition(ctx context.Context, t backends.Transition) error
	Renew(ctx context.Context, r backends.Renewal) ([]string, error)
}

// Bodies opens a message's bytes by the path its row records: a spool file,
// or bytes the outbox keeps (spool.Bodies).
type Bodies interface {
	Open(path string) (io.ReadCloser, error)
}

// Deliverer claims messages for delivery in the transition that makes them
// READY (delivery.Engine): Reserve adds the claim to t and holds a place
// for the message, when delivery has room and nothing else due waits for
// it; then Deliver takes the message once t has landed, or Release gives
// the place back.
type Deliverer interface {
	Reserve(t *backends.Transition) bool
	Deliver(m *backends.Message)
	Release()
	// Wake tells it that messages became READY for a claim.
	Wake()
}

// Holder holds back the recipients the suppression list holds
// (suppression.Policy).
type Holder interface {
	// StreamOf is m's stream, route being the route chosen for it.
	StreamOf(m *backends.Message, route string) string
	// Hold marks the pending recipients of results that the list holds
	// back from stream, and says how many it marked.
	Hold(ctx context.Context, stream string, results []outcome.Recipient, now time.Time) ([]outcome.Recipient, int, error)
}

// Router names the route a message will take, or says why it cannot be sent.
type Router func(m *backends.Message) (string, error)

// WorkerConfig tunes the intake worker.
type WorkerConfig struct {
	// Concurrency is how many messages are prepared at once.
	Concurrency int
	// Lease is how long a message may stay INTAKING without a sign of life
	// before another worker may take it over; the worker renews the leases
	// of the messages it holds every third of it.
	Lease time.Duration
	// Poll is how often the outbox is checked when nothing wakes the worker
	// (messages accepted by another relay, restored leases).
	Poll time.Duration
	// Owner names this worker in the history.
	Owner string
	// Delivery, when set, takes READY messages straight from the worker,
	// and is woken when messages became READY for a claim.
	Delivery Deliverer
	// MaxAge ends a message whose file could not be read for this long
	// (the delivery's maximum age); until then its lease brings it back.
	MaxAge time.Duration
	// Holds, when set, holds back the recipients on the suppression list.
	Holds Holder
	// Batches, when set, counts the messages each batch takes in.
	Batches Counter
}

// Counter counts what happens to batches (brake.Brake).
type Counter interface {
	Count(batch, messageID string, t backends.BatchTally)
}

// Worker moves ACCEPTED messages to READY, or INVALID with the reason.
type Worker struct {
	cfg    WorkerConfig
	store  WorkerStore
	leases *lease.Renewer
	spool  Bodies
	route  Router
	log    *slog.Logger
	sig    *claimloop.Signals
	// inbox holds the messages this relay has just accepted (Accepted).
	inbox chan *backends.Message
	// claimed are the ids the last claim took, which their copies in the
	// inbox must not prepare again (Run's alone).
	claimed map[string]bool
}

func NewWorker(cfg WorkerConfig, store WorkerStore, sp Bodies, route Router, log *slog.Logger) *Worker {
	return &Worker{cfg: cfg, store: store, leases: lease.New(store, backends.StatusIntaking, cfg.Lease, log),
		spool: sp, route: route, log: log, sig: claimloop.NewSignals(),
		inbox: make(chan *backends.Message, cfg.claimLimit())}
}

// claimLimit is how many messages the worker takes in at once.
func (c WorkerConfig) claimLimit() int { return c.Concurrency * 16 }

// Wake tells the worker that a message is waiting.
func (w *Worker) Wake() { w.sig.Wake() }

// Accepted hands the worker m, a message this relay has just created and
// which is still ACCEPTED: the worker moves it to READY or INVALID in one
// transition, with no claim and no lease. Claims are what relays sharing a
// store pay for most, and each relay would claim what it accepted itself.
// Meanwhile the message stays ACCEPTED, so nothing is lost if this relay
// stops: a claim takes it, this relay's own or another's, and the
// transition of whichever comes second is refused. When the worker has
// more in hand than one claim would take, m waits for a claim too.
func (w *Worker) Accepted(m *backends.Message) {
	select {
	case w.inbox <- m:
	default:
		w.Wake()
	}
}

// Run prepares messages until ctx ends. The messages it holds when ctx ends
// are finished first: preparing one takes milliseconds, but a claim holds
// many, so their leases are renewed meanwhile.
func (w *Worker) Run(ctx context.Context) {
	renewCtx, stopRenewing := context.WithCancel(context.Background())
	var renewer sync.WaitGroup
	renewer.Go(func() { w.leases.Run(renewCtx) })
	defer renewer.Wait()
	defer stopRenewing()
	claimloop.Run(ctx, w.sig, claimloop.Stage[*backends.Message]{
		Poll: w.cfg.Poll, Claim: w.claimStep, Log: w.log, What: "intake: claims of accepted messages",
		// What this relay accepted is prepared as it comes, in the
		// loop's turn, so that no claim takes it meanwhile.
		Handed: w.inbox, Take: func(m *backends.Message) { w.prepareAll(w.takeInbox(m)) },
	})
}

// claimStep prepares what was handed over, then claims and prepares a
// batch.
func (w *Worker) claimStep() (claimloop.Result, error) {
	// What was handed over goes first: a claim would take it too, and it
	// would be prepared twice.
	select {
	case m := <-w.inbox:
		w.prepareAll(w.takeInbox(m))
	default:
	}
	msgs, err := w.claim()
	w.prepareAll(msgs)
	if len(msgs) == w.cfg.claimLimit() {
		return claimloop.More, err
	}
	return claimloop.Drained, err
}

// claim claims a batch of ACCEPTED messages.
func (w *Worker) claim() ([]*backends.Message, error) {
	now := time.Now().UTC()
	msgs, err := w.store.Claim(context.Background(), backends.Claim{
		From: backends.StatusAccepted, To: backends.StatusIntaking,
		Now: now, LeaseUntil: now.Add(w.cfg.Lease),
		Limit: w.cfg.claimLimit(), Reason: "claimed for intake by " + w.cfg.Owner,
	})
	w.claimed = make(map[string]bool, len(msgs))
	for _, m := range msgs {
		w.claimed[m.ID] = true
	}
	return msgs, err
}

// takeInbox returns first and the messages waiting behind it in the
// inbox, up to a claim's worth, but for those the last claim took.
func (w *Worker) takeInbox(first *backends.Message) []*backends.Message {
	var msgs []*backends.Message
	for m := first; ; {
		if !w.claimed[m.ID] {
			msgs = append(msgs, m)
		}
		if len(msgs) == w.cfg.claimLimit() {
			return msgs
		}
		select {
		case m = <-w.inbox:
		default:
			return msgs
		}
	}
}

// prepareAll checks the messages, claimed ones (INTAKING) and ones handed
// over (ACCEPTED), at most Concurrency at once, and records each outcome
// without holding a checking slot: the records of a whole batch then share
// the outbox's commits instead of waiting for one another.
func (w *Worker) prepareAll(msgs []*backends.Message) {
	slots := make(chan struct{}, w.cfg.Concurrency)
	var wg sync.WaitGroup
	var waiting atomic.Bool // a message is READY for a claim
	for _, m := range msgs {
		var hold *lease.Hold
		if m.Status == backends.StatusIntaking {
			hold = w.leases.Hold(m.ID, m.LeaseUntil)
		}
		wg.Go(func() {
			slots <- struct{}{}
			t, ok := w.prepare(m)
			<-slots
			var leases []time.Time
			if hold != nil {
				leases = w.leases.Release(hold)
			}
			if ok && w.record(m, t, leases) {
				waiting.Store(true)
			}
		})
	}
	wg.Wait()
	if waiting.Load() && w.cfg.Delivery != nil {
		w.cfg.Delivery.Wake()
	}
}

// unreadable is a message whose file could not be read: not its fault, so
// never a reason to end it before its time.
type unreadable struct{ err error }

func (u unreadable) Error() string { return u.err.Error() }

// open opens the bytes at path, a message's or its seed payload's; those
// that cannot be read are unreadable.
func (w *Worker) open(path string) (io.ReadCloser, error) {
	f, err := w.spool.Open(path)
	if err != nil {
		return nil, unreadable{err}
	}
	return f, nil
}

// prepare checks one INTAKING or ACCEPTED message and says where it goes
// next; ok is false when it stays where it is, for its lease to bring it
// back or a claim to take it: its file could not be read (a missing mount,
// a volume's hiccup), and it is tried again then, until its maximum age.
func (w *Worker) prepare(m *backends.Message) (backends.Transition, bool) {
	t := backends.Transition{ID: m.ID, From: m.Status, To: backends.StatusReady}
	route, err := w.adoptAndCheck(m, &t)
	var u unreadable
	if errors.As(err, &u) {
		if age := time.Since(m.CreatedAt); age < w.cfg.MaxAge {
			w.log.Error("intake: the message's file cannot be read; it is tried again when its lease ends, or, not claimed, at the next claim", "id", m.ID,
				"error", err, "lease", w.cfg.Lease)
			return t, false
		}
		err = fmt.Errorf("expired: its file could not be read for %s: %w", w.cfg.MaxAge, err)
	}
	if err != nil {
		t.To = backends.StatusInvalid
		t.Reason = err.Error()
		t.Event = backends.OutcomeEvent(t.From, backends.StatusInvalid, t.Reason, nil)
		return t, true
	}
	t.Route = route
	t.Reason = "ready for route " + route
	if m.DueAt.After(time.Now()) {
		t.Reason += ", not before " + m.DueAt.UTC().Format(time.RFC3339)
	}
	if err := w.hold(m, &t); err != nil {
		// The store that could not answer is the one the message is in:
		// it waits for its lease, or the next claim, as an unreadable
		// file does.
		w.log.Error("intake: cannot read the suppression list; the message is tried again when its lease ends, or, not claimed, at the next claim",
			"id", m.ID, "error", err)
		return t, false
	}
	return t, true
}

// hold marks the recipients the suppression list holds back from the
// message's stream; when it holds them all, the message ends SUPPRESSED
// with its event.
func (w *Worker) hold(m *backends.Message, t *backends.Transition) error {
	if w.cfg.Holds == nil {
		return nil
	}
	stream := w.cfg.Holds.StreamOf(m, t.Route)
	results, n, err := w.cfg.Holds.Hold(context.Background(), stream, m.RecipientResults(), time.Now().UTC())
	if err != nil || n == 0 {
		return err
	}
	t.Results = results
	if n < len(results) {
		t.Reason += fmt.Sprintf("; %d of %d recipients suppressed", n, len(results))
		return nil
	}
	t.To = backends.StatusSuppressed
	t.Reason = "not sent: every recipient is suppressed; " + results[0].Address + ": " + results[0].Text
	t.Event = backends.OutcomeEvent(t.From, backends.StatusSuppressed, t.Reason, map[string]any{"stream": stream, "recipients": results})
	return nil
}

// record moves the message on, and reports whether it left it READY for a
// claim. A claimed one holds its lease: the first of leases, or the next
// when the outbox refuses it (a renewal whose outcome was unknown may have
// landed); whatever happens, it leaves INTAKING, or its lease brings it
// back to ACCEPTED. One handed over holds none, and stays ACCEPTED for a
// claim when its move fails. A READY message goes on to delivery in the
// same move when delivery takes it (Deliverer); one of a batch waits for a
// claim, which knows whether the batch is suspended.
func (w *Worker) record(m *backends.Message, t backends.Transition, leases []time.Time) bool {
	t.At = time.Now().UTC()
	deliver := w.cfg.Delivery != nil && t.To == backends.StatusReady && m.Batch == "" && !m.DueAt.After(t.At) &&
		w.cfg.Delivery.Reserve(&t)
	write := func(t backends.Transition) error { return w.store.Transition(context.Background(), t) }
	var err error
	if t.From == backends.StatusIntaking {
		err = lease.Write(t, leases, write)
	} else {
		err = write(t)
	}
	if deliver && err != nil {
		w.cfg.Delivery.Release()
	}
	switch {
	case t.From == backends.StatusAccepted && errors.Is(err, backends.ErrLockNotAcquired):
		w.log.Debug("intake: another worker claimed the message first; it prepares it", "id", t.ID)
		return false
	case err != nil:
		// The lease or a claim takes the message again; nothing is lost.
		w.log.Error("intake: cannot record the prepared message; it is tried again when its lease ends, or, not claimed, at the next claim", "id", t.ID, "to", t.To, "error", err)
		return false
	case t.To == backends.StatusInvalid:
		w.log.Warn("invalid", "id", t.ID, "reason", t.Reason)
		return false
	case t.To == backends.StatusSuppressed:
		w.log.Info("suppressed", "id", t.ID, "reason", t.Reason)
		return false
	}
	if w.cfg.Batches != nil {
		w.cfg.Batches.Count(m.Batch, m.ID, backends.BatchTally{Messages: 1})
	}
	w.log.Info("ready", "id", m.ID, "route", t.Route, "priority", m.Priority, "due", m.DueAt, "delivering", deliver)
	if !deliver {
		return true
	}
	t.Apply(m, t.Final())
	w.cfg.Delivery.Deliver(m)
	return false
}

// adoptAndCheck refuses a message intake refused; it gives a row taken over from the seed layout, which has no
// envelope in the row, the envelope its files say, then checks it.
func (w *Worker) adoptAndCheck(m *backends.Message, t *backends.Transition) (string, error) {
	if m.Envelope.Refused != "" {
		// Intake refused it, with no reply to tell its sender: INVALID
		// is how the app hears why (Server.Refuse).
		return "", errors.New(m.Envelope.Refused)
	}
	if len(m.Envelope.Recipients) == 0 {
		env, err := w.seedEnvelope(m)
		if err != nil {
			return "", err
		}
		m.Envelope, t.Envelope = env, &env
	}
	return w.check(m)
}

// check reads the spool file through its whole MIME structure and asks the
// router for a route.
func (w *Worker) check(m *backends.Message) (string, error) {
	f, err := w.open(m.EmlPath)
	if err != nil {
		return "", err
	}
	defer f.Close()
	e, err := message.Read(f)
	if err != nil && !message.IsUnknownCharset(err) && !message.IsUnknownEncoding(err) {
		return "", fmt.Errorf("the message cannot be parsed: %w", err)
	}
	if err := walkMIME(e, "1", 0); err != nil {
		return "", err
	}
	return w.route(m)
}

// walkMIME checks that every multipart is well formed: boundaries present
// and closed, part headers readable. Bodies are not decoded: a receiver may
// cope with a bad base64 line, and the relay must not judge content.
func walkMIME(e *message.Entity, path string, depth int) error {
	if depth > maxMIMEDepth {
		return fmt.Errorf("MIME part %s is nested more than %d levels deep", path, maxMIMEDepth)
	}
	mr := e.MultipartReader()
	if mr == nil {
		return nil
	}
	for i := 1; ; i++ {
		p, err := mr.NextPart()
		if err == io.EOF {
			return nil
		}
		if err != nil && !message.IsUnknownCharset(err) && !message.IsUnknownEncoding(err) {
			return fmt.Errorf("MIME part %s.%d is malformed: %w", path, i, err)
		}
		if err := walkMIME(p, fmt.Sprintf("%s.%d", path, i), depth+1); err != nil {
			return err
		}
	}
}
