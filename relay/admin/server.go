package admin

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/genropy/postino/backends"
)

// Store is what the API needs of the outbox.
type Store interface {
	Get(ctx context.Context, id string) (*backends.Message, error)
	History(ctx context.Context, id string) ([]backends.HistoryEntry, error)
	Events(ctx context.Context, messageID string) ([]*backends.Event, error)
	EventsByState(ctx context.Context, state backends.EventState, limit int) ([]*backends.Event, error)
	UpdateEvent(ctx context.Context, u backends.EventUpdate) (*backends.Event, error)
	List(ctx context.Context, q backends.ListQuery) ([]*backends.Message, string, error)
	Transition(ctx context.Context, t backends.Transition) error
	SuspendBatch(ctx context.Context, code string) error
	ActivateBatch(ctx context.Context, code string) error
	SuspendedBatches(ctx context.Context) ([]string, error)
	ListBatches(ctx context.Context, after string, limit int) ([]string, string, error)
	BatchCounts(ctx context.Context, code string) (map[backends.Status]int, error)
	BatchTallies(ctx context.Context, codes []string) (map[string]backends.BatchTally, error)
	Counts(ctx context.Context) (map[backends.Status]int, error)
	ByMessageID(ctx context.Context, messageID string) ([]*backends.Message, error)
	Minutes(ctx context.Context, since time.Time) ([]backends.Minute, error)

	// The suppression list.
	Suppress(ctx context.Context, c backends.SuppressionChange) (backends.Suppression, error)
	Suppressed(ctx context.Context, stream string, addrs []string, now time.Time) ([]backends.Suppression, error)
	SuppressionsOf(ctx context.Context, addr string) ([]backends.Suppression, error)
	Unsuppress(ctx context.Context, r backends.SuppressionRemoval) error
	SuppressionHistory(ctx context.Context, addr string) ([]backends.SuppressionEvent, error)
	ListSuppressions(ctx context.Context, q backends.SuppressionQuery) ([]backends.Suppression, string, error)
	SuppressionCounts(ctx context.Context) (map[backends.SuppressionReason]int, error)
	ImportSuppressions(ctx context.Context, entries []backends.Suppression, by string) error
}

// Options wire the API to the rest of the relay.
type Options struct {
	// Metrics serves /metrics.
	Metrics http.Handler
	// Ready reports the state of each part the relay needs; an error makes
	// /readyz answer 503.
	Ready func(ctx context.Context) map[string]error
	// Degraded reports parts whose failure leaves the relay taking and
	// sending mail (a plugin that is down: its events wait): /readyz still
	// answers 200, saying "degraded".
	Degraded func() map[string]error
	// Wake tells the workers that a message became ready through the API.
	Wake func()
	// WakeEvents tells the callback stage that an event was replayed.
	WakeEvents func()
	// Receipts are the receipts kept with the messages (PEC evidence).
	Receipts Receipts
	// Policy says which entries hold a stream's mail back, for
	// GET /v1/suppressions/{address}/check; without it, every reason does.
	Policy Policy
	// MaxImportBytes bounds a file POST /v1/suppressions/import takes;
	// 0 is suppression.DefaultMaxCSVBytes.
	MaxImportBytes int64
	// Token, when set, is required of every call but the probes.
	Token string
	// Profiling serves net/http/pprof under /debug/pprof/.
	Profiling bool
	// Sites are MX delivery's sites, for /v1/destinations.
	Sites Sites
	// Thresholds are the brake's, shown with each batch's rates.
	Thresholds Thresholds
	Log        *slog.Logger
}

// Receipts is where the receipts of messages are kept, by the path of
// each message's bytes: the spool or the outbox, whichever holds them.
type Receipts interface {
	Receipts(ctx context.Context, path string) ([]backends.Receipt, error)
	// OpenReceipt answers backends.ErrNotFound for a receipt the message
	// does not have.
	OpenReceipt(ctx context.Context, path, name string) (io.ReadCloser, error)
}

const (
	defaultListLimit = 50
	maxListLimit     = 1000
)

// NewHandler serves the admin API.
func NewHandler(store Store, opts Options) http.Handler {
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	a := &api{store: store, opts: opts, recent: recentKind()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/messages", a.list)
	mux.HandleFunc("GET /v1/messages/{id}", a.get)
	mux.HandleFunc("POST /v1/messages/{id}/retry", a.retry)
	mux.HandleFunc("POST /v1/messages/{id}/cancel", a.cancel)
	mux.HandleFunc("POST /v1/batches/{code}/suspend", a.batch(store.SuspendBatch, true))
	mux.HandleFunc("POST /v1/batches/{code}/activate", a.batch(store.ActivateBatch, false))
	mux.HandleFunc("POST /v1/batches/{code}/cancel", a.cancelBatch)
	mux.HandleFunc("GET /v1/batches", a.batches)
	mux.HandleFunc("GET /v1/batches/{code}", a.showBatch)
	mux.HandleFunc("GET /v1/messages/{id}/receipts", a.receipts)
	mux.HandleFunc("GET /v1/messages/{id}/receipts/{name}", a.receipt)
	mux.HandleFunc("GET /v1/events", a.events)
	mux.HandleFunc("POST /v1/events/{id}/replay", a.replay)
	mux.HandleFunc("GET /v1/stats", a.stats)
	mux.HandleFunc("GET /v1/stats/ready", a.readyStats)
	mux.HandleFunc("GET /v1/stats/recent", a.recentStats)
	mux.HandleFunc("GET /v1/search", a.search)
	a.suppressionRoutes(mux)
	a.siteRoutes(mux)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", a.readyz)
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	if opts.Profiling {
		profiles(mux)
	}
	ui := dashboard()
	mux.Handle("GET /{$}", ui)
	mux.Handle("GET /ui/", ui)
	// A web page the operator opens elsewhere must not drive the API
	// through the operator's browser: cross-site writes are refused.
	return http.NewCrossOriginProtection().Handler(authorize(opts.Token, mux))
}

type api struct {
	store Store
	opts  Options
	// recent is the overview list each status belongs to, if any.
	recent map[backends.Status]string

	// The overview's lists as last read, with the counts they were read
	// at: a dashboard asks every few seconds, and one reading can go
	// through thousands of messages.
	mu         sync.Mutex
	recentAt   time.Time
	recentKey  string
	recentLast Recent
	readyAt    time.Time
	readyLast  *ReadyCounts
}

// listLimit reads a list's ?limit=, def when there is none.
func listLimit(r *http.Request, def int) (int, error) {
	s := r.URL.Query().Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxListLimit {
		return 0, fmt.Errorf("limit %q: give a number from 1 to %d", s, maxListLimit)
	}
	return n, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, Error{Error: fmt.Sprintf(format, args...)})
}

// storeError answers for an outbox error. The outbox's own verdicts (not
// found, a status that changed, a cursor it did not give) are told as they
// are; the text of any other failure may name files, sockets and hosts of
// the machine, and goes to the log only.
func (a *api) storeError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, backends.ErrNotFound):
		writeError(w, http.StatusNotFound, "%v", err)
	case errors.Is(err, backends.ErrBadCursor):
		writeError(w, http.StatusBadRequest, "%v", err)
	case errors.Is(err, backends.ErrLockNotAcquired):
		writeError(w, http.StatusConflict, "the message changed status meanwhile; look at it again and retry: %v", err)
	case errors.Is(err, backends.ErrInvalidTransition):
		writeError(w, http.StatusConflict, "%v", err)
	default:
		a.internalError(w, r, "the outbox failed", err)
	}
}

// internalError answers a failure of the relay's own storage: the cause is
// logged under a reference that the reply gives, for the operator to find.
func (a *api) internalError(w http.ResponseWriter, r *http.Request, what string, err error) {
	ref := rand.Text()[:10]
	a.opts.Log.Error("admin API: "+what, "ref", ref, "method", r.Method, "path", r.URL.Path, "error", err)
	writeError(w, http.StatusServiceUnavailable,
		"%s; try again later, and if it goes on, the relay's log says why under ref=%s", what, ref)
}

func (a *api) receipts(w http.ResponseWriter, r *http.Request) {
	m, err := a.store.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	list, err := a.opts.Receipts.Receipts(r.Context(), m.EmlPath)
	if errors.Is(err, backends.ErrNotFound) {
		// Purged since the Get: 404, not a 503 that asks to retry.
		writeError(w, http.StatusNotFound, "message %s is gone; look for it again with GET /v1/messages/%s", m.ID, m.ID)
		return
	}
	if err != nil {
		a.internalError(w, r, "cannot list the receipts of "+m.ID, err)
		return
	}
	if list == nil {
		list = []backends.Receipt{}
	}
	writeJSON(w, http.StatusOK, ReceiptList{Receipts: list})
}

// receipt answers one receipt as it came, message/rfc822.
func (a *api) receipt(w http.ResponseWriter, r *http.Request) {
	m, err := a.store.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	name := r.PathValue("name")
	if err := backends.CheckReceiptName(name); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	f, err := a.opts.Receipts.OpenReceipt(r.Context(), m.EmlPath, name)
	if errors.Is(err, backends.ErrNotFound) {
		writeError(w, http.StatusNotFound, "message %s has no receipt %s; list them with GET /v1/messages/%s/receipts", m.ID, name, m.ID)
		return
	}
	if err != nil {
		a.internalError(w, r, fmt.Sprintf("cannot read receipt %s of %s", name, m.ID), err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "message/rfc822")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	io.Copy(w, f)
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	q := backends.ListQuery{Limit: defaultListLimit, After: r.URL.Query().Get("after"), Batch: r.URL.Query().Get("batch")}
	if q.Batch != "" {
		if err := backends.CheckBatch(q.Batch); err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
	}
	if s := r.URL.Query().Get("status"); s != "" {
		st, err := backends.ParseStatus(s)
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		q.Status = st
	}
	var err error
	if q.Limit, err = listLimit(r, q.Limit); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	msgs, next, err := a.store.List(r.Context(), q)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	out := MessageList{Messages: make([]Message, len(msgs)), Next: next}
	for i, m := range msgs {
		out.Messages[i] = messageView(m)
	}
	if err := a.markWaiting(r, out.Messages); err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	m, err := a.store.Get(r.Context(), id)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	h, err := a.store.History(r.Context(), id)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	v := messageView(m)
	v.History = make([]HistoryEntry, len(h))
	for i, e := range h {
		v.History[i] = HistoryEntry{Status: string(e.Status), Reason: e.Reason, At: e.At}
		if len(e.Details) > 0 {
			v.History[i].Details = e.Details
		}
	}
	events, err := a.store.Events(r.Context(), id)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	for _, e := range events {
		v.Events = append(v.Events, eventView(e))
	}
	one := []Message{v}
	if err := a.markWaiting(r, one); err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, one[0])
}

// retry sends a message on its way again: a READY message now, a FAILED one
// back to READY, an INVALID one through intake again, each due when
// retryDue says; ?now=true makes every one due now.
func (a *api) retry(w http.ResponseWriter, r *http.Request) {
	now := false
	if s := r.URL.Query().Get("now"); s != "" {
		var err error
		if now, err = strconv.ParseBool(s); err != nil {
			writeError(w, http.StatusBadRequest, "now %q: give true or false", s)
			return
		}
	}
	a.operate(w, r, "retry", retryTo, func(m *backends.Message, at time.Time) time.Time { return retryDue(m, now, at) })
}

// cancel stops a message that has not left.
func (a *api) cancel(w http.ResponseWriter, r *http.Request) {
	a.operate(w, r, "cancel", cancelTo, nil)
}

// operate applies an operator's action: decide picks the target status, or
// says why the action does not apply; due, when not nil, says when the
// message is due after the move.
func (a *api) operate(w http.ResponseWriter, r *http.Request, action string, decide func(backends.Status) (backends.Status, string),
	due func(m *backends.Message, at time.Time) time.Time) {
	id := r.PathValue("id")
	m, err := a.store.Get(r.Context(), id)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	to, why := decide(m.Status)
	if to == "" {
		writeError(w, http.StatusConflict, "cannot %s message %s: it is %s; %s", action, id, m.Status, why)
		return
	}
	t := backends.Transition{ID: id, From: m.Status, To: to, Reason: why}
	if to == backends.StatusFailed {
		t.Event = backends.OutcomeEvent(m.Status, to, why, nil)
	}
	if m.Status == backends.StatusSuppressedAcknowledged {
		t.Results = retryResults(m)
	}
	if due != nil {
		at := time.Now().UTC()
		if t.DueAt = due(m, at); t.DueAt.After(at) {
			t.Reason += "; due at its " + backends.HeaderSendAfter + ", " + t.DueAt.Format(time.RFC3339)
		}
	}
	if err := a.store.Transition(r.Context(), t); err != nil {
		a.storeError(w, r, err)
		return
	}
	if m, err = a.store.Get(r.Context(), id); err != nil {
		a.storeError(w, r, err)
		return
	}
	a.opts.Log.Info("operator "+action, "id", id, "status", m.Status)
	if a.opts.Wake != nil {
		a.opts.Wake()
	}
	// The action is done: a failure to read why the message waits leaves
	// that out of the answer, and does not make it an error.
	one := []Message{messageView(m)}
	if err := a.markWaiting(r, one); err != nil {
		a.opts.Log.Warn("admin API: cannot tell why the message waits", "id", id, "error", err)
	}
	writeJSON(w, http.StatusOK, one[0])
}

// markWaiting says why the READY messages among views wait; the
// suspended batches are read only when there is one.
func (a *api) markWaiting(r *http.Request, views []Message) error {
	if !slices.ContainsFunc(views, func(v Message) bool { return v.Status == string(backends.StatusReady) }) {
		return nil
	}
	suspended, err := a.suspended(r)
	if err != nil {
		return err
	}
	now := time.Now()
	for i, v := range views {
		views[i].Waiting = waiting(v.Status, v.Batch, v.Attempts, v.DueAt, suspended, now)
		if views[i].Waiting == WaitingSuspended {
			views[i].HeldBy = v.Batch
		}
	}
	return nil
}

func (a *api) batch(op func(context.Context, string) error, suspend bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		code := r.PathValue("code")
		if err := backends.CheckBatch(code); err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		if err := op(r.Context(), code); err != nil {
			a.storeError(w, r, err)
			return
		}
		a.opts.Log.Info("batch changed", "batch", code, "suspended", suspend)
		if !suspend && a.opts.Wake != nil {
			a.opts.Wake()
		}
		writeJSON(w, http.StatusOK, map[string]any{"batch": code, "suspended": suspend})
	}
}

func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	checks := map[string]string{}
	code := http.StatusOK
	if a.opts.Ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		for name, err := range a.opts.Ready(ctx) {
			checks[name] = "ok"
			if err != nil {
				checks[name] = err.Error()
				code = http.StatusServiceUnavailable
			}
		}
	}
	status := "ready"
	if a.opts.Degraded != nil {
		for name, err := range a.opts.Degraded() {
			checks[name] = "ok"
			if err != nil {
				checks[name] = err.Error()
				status = "degraded"
			}
		}
	}
	out := Readiness{Status: status, Checks: checks}
	if code != http.StatusOK {
		out.Status = "not ready"
		out.Error = "not ready: " + out.Failing()
	}
	if !authorized(a.opts.Token, r) {
		// Probes need the code; what each check says (addresses, paths,
		// account names) is for those who hold the token.
		out.Checks = nil
		if out.Error != "" {
			out.Error = "not ready: send the admin token to see why"
		}
	}
	writeJSON(w, code, out)
}

// events lists events in a state: parked by default, the ones that need an
// operator.
func (a *api) events(w http.ResponseWriter, r *http.Request) {
	state := backends.EventState(r.URL.Query().Get("state"))
	if state == "" {
		state = backends.EventParked
	}
	switch state {
	case backends.EventPending, backends.EventCalling, backends.EventAcked, backends.EventParked:
	default:
		writeError(w, http.StatusBadRequest, "state %q: use pending, calling, acked or parked", state)
		return
	}
	limit, err := listLimit(r, defaultListLimit)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	events, err := a.store.EventsByState(r.Context(), state, limit)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	out := EventList{Events: []Event{}}
	for _, e := range events {
		out.Events = append(out.Events, eventView(e))
	}
	writeJSON(w, http.StatusOK, out)
}

// replay sends a parked event to the plugins again, tries counted afresh
// from where they stood.
func (a *api) replay(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	e, err := a.store.UpdateEvent(r.Context(), backends.EventUpdate{ID: id, From: backends.EventParked, To: backends.EventPending,
		Reason: "replayed by an operator"})
	if errors.Is(err, backends.ErrLockNotAcquired) {
		writeError(w, http.StatusConflict, "event %s is not parked: only parked events can be replayed", id)
		return
	}
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.opts.Log.Info("operator replay", "event", id, "id", e.MessageID)
	if a.opts.WakeEvents != nil {
		a.opts.WakeEvents()
	}
	writeJSON(w, http.StatusOK, eventView(e))
}
