package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
)

// Batch is a campaign's progress, and the brake's view of it.
type Batch struct {
	Code      string `json:"code"`
	Suspended bool   `json:"suspended"`
	// Tripped says why the brake suspended it, and TrippedAt when.
	Tripped   string     `json:"tripped,omitempty"`
	TrippedAt *time.Time `json:"tripped_at,omitempty"`
	// Progress counts its messages by where they stand; Statuses, by
	// status.
	Progress Progress       `json:"progress"`
	Statuses map[string]int `json:"statuses"`
	// Brake is what the brake counted since the batch began or an
	// operator last activated it, with its rates and thresholds.
	Brake BrakeView `json:"brake"`
}

// Progress is where a batch's messages stand.
type Progress struct {
	// Messages is how many the relays took into the batch.
	Messages   int64 `json:"messages"`
	Sent       int   `json:"sent"`
	Failed     int   `json:"failed"`
	Bounced    int   `json:"bounced"`
	Suppressed int   `json:"suppressed"`
	Waiting    int   `json:"waiting"`
	// Held are READY while the batch is suspended.
	Held     int `json:"held"`
	InFlight int `json:"in_flight"`
}

// BrakeView is a batch's counts for the brake, against its thresholds.
type BrakeView struct {
	Sent          int64   `json:"sent"`
	Hard          int64   `json:"hard"`
	Complaints    int64   `json:"complaints"`
	HardRate      float64 `json:"hard_rate"`
	ComplaintRate float64 `json:"complaint_rate"`
	Thresholds
}

// Thresholds are the brake's (relay brake settings).
type Thresholds struct {
	MinSent          int64   `json:"min_sent"`
	MaxHardRate      float64 `json:"max_hard_rate"`
	MaxComplaintRate float64 `json:"max_complaint_rate"`
	Off              bool    `json:"off,omitempty"`
}

// BatchList is a page of batches.
type BatchList struct {
	Batches []Batch `json:"batches"`
	Next    string  `json:"next,omitempty"`
}

// progressOf sorts a batch's status counts into its progress.
func progressOf(counts map[backends.Status]int, suspended bool) Progress {
	var p Progress
	for st, n := range counts {
		switch {
		case st == backends.StatusReady && suspended:
			p.Held += n
		case st.Undelivered() && st.Working():
			p.InFlight += n
		case st.Undelivered():
			p.Waiting += n
		default:
			*p.outcome(st) += n
		}
	}
	return p
}

// outcome is the count an outcome's status (or its calling or
// acknowledged one) adds to.
func (p *Progress) outcome(st backends.Status) *int {
	name := string(st)
	for _, prefix := range []string{"CALLING-", "PEC-"} {
		name = strings.TrimPrefix(name, prefix)
	}
	switch {
	case strings.HasPrefix(name, "SUPPRESSED"):
		return &p.Suppressed
	case strings.HasPrefix(name, "BOUNCED"):
		return &p.Bounced
	case strings.HasPrefix(name, "FAILED"), strings.HasPrefix(name, "INVALID"), strings.HasPrefix(name, "NOT-"):
		return &p.Failed
	}
	return &p.Sent
}

func (a *api) batchView(ctx context.Context, code string, suspended map[string]bool) (Batch, error) {
	counts, err := a.store.BatchCounts(ctx, code)
	if err != nil {
		return Batch{}, err
	}
	tallies, err := a.store.BatchTallies(ctx, []string{code})
	if err != nil {
		return Batch{}, err
	}
	t := tallies[code]
	b := Batch{Code: code, Suspended: suspended[code], Tripped: t.Tripped, Statuses: map[string]int{},
		Progress: progressOf(counts, suspended[code]),
		Brake:    BrakeView{Sent: t.Sent, Hard: t.Hard, Complaints: t.Complaints, Thresholds: a.opts.Thresholds}}
	b.Progress.Messages = t.Messages
	if !t.TrippedAt.IsZero() {
		b.TrippedAt = &t.TrippedAt
	}
	for st, n := range counts {
		b.Statuses[string(st)] = n
	}
	if tried := t.Sent + t.Hard; tried > 0 {
		b.Brake.HardRate = float64(t.Hard) / float64(tried)
	}
	if t.Sent > 0 {
		b.Brake.ComplaintRate = float64(t.Complaints) / float64(t.Sent)
	}
	return b, nil
}

// batches answers GET /v1/batches: a page of batches with their progress.
func (a *api) batches(w http.ResponseWriter, r *http.Request) {
	limit, err := listLimit(r, defaultListLimit)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	codes, next, err := a.store.ListBatches(r.Context(), r.URL.Query().Get("after"), limit)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	suspended, err := a.suspended(r)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	out := BatchList{Batches: make([]Batch, 0, len(codes)), Next: next}
	for _, code := range codes {
		b, err := a.batchView(r.Context(), code, suspended)
		if err != nil {
			a.storeError(w, r, err)
			return
		}
		out.Batches = append(out.Batches, b)
	}
	writeJSON(w, http.StatusOK, out)
}

// showBatch answers GET /v1/batches/{code}.
func (a *api) showBatch(w http.ResponseWriter, r *http.Request) {
	code := r.PathValue("code")
	if err := backends.CheckBatch(code); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	suspended, err := a.suspended(r)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	b, err := a.batchView(r.Context(), code, suspended)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	if len(b.Statuses) == 0 && b.Progress.Messages == 0 && !b.Suspended {
		writeError(w, http.StatusNotFound, "no batch %s: no message carries it", code)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

// CancelResult says what a batch's cancel ended.
type CancelResult struct {
	Batch     string `json:"batch"`
	Cancelled int    `json:"cancelled"`
}

// cancelBatch answers POST /v1/batches/{code}/cancel?reason=…: the batch
// is suspended, so that nothing more of it is claimed, and each of its
// waiting messages (ACCEPTED, READY) ends FAILED with the reason and its
// event. Messages on their way (INTAKING, PROCESSING) finish; one that
// becomes READY after is held by the suspension, for a second cancel.
func (a *api) cancelBatch(w http.ResponseWriter, r *http.Request) {
	code := r.PathValue("code")
	if err := backends.CheckBatch(code); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	why := strings.TrimSpace(r.URL.Query().Get("reason"))
	if why == "" {
		writeError(w, http.StatusBadRequest, "give the reason the batch is cancelled (reason=…): its messages' apps hear it")
		return
	}
	if err := a.store.SuspendBatch(r.Context(), code); err != nil {
		a.storeError(w, r, err)
		return
	}
	n := 0
	for _, st := range []backends.Status{backends.StatusReady, backends.StatusAccepted} {
		done, err := a.cancelAll(r.Context(), code, st, "cancelled with its batch "+code+" by an operator: "+why)
		n += done
		if err != nil {
			a.storeError(w, r, err)
			return
		}
	}
	a.opts.Log.Info("operator cancel batch", "batch", code, "cancelled", n, "reason", why)
	if a.opts.WakeEvents != nil {
		a.opts.WakeEvents()
	}
	writeJSON(w, http.StatusOK, CancelResult{Batch: code, Cancelled: n})
}

// cancelAll ends the batch's messages in st, page by page; one that moved
// meanwhile (a claim took it) is left alone.
func (a *api) cancelAll(ctx context.Context, code string, st backends.Status, why string) (int, error) {
	n := 0
	q := backends.ListQuery{Batch: code, Status: st, Limit: 500}
	for {
		msgs, next, err := a.store.List(ctx, q)
		if err != nil {
			return n, err
		}
		for _, m := range msgs {
			t := backends.Transition{ID: m.ID, From: st, To: backends.StatusFailed, Reason: why,
				Event: backends.OutcomeEvent(st, backends.StatusFailed, why, nil)}
			switch err := a.store.Transition(ctx, t); {
			case errors.Is(err, backends.ErrLockNotAcquired):
			case err != nil:
				return n, fmt.Errorf("cancel %s: %w", m.ID, err)
			default:
				n++
			}
		}
		if next == "" {
			return n, nil
		}
		q.After = next
	}
}

// ListBatches returns a page of batches with their progress.
func (c *Client) ListBatches(ctx context.Context, limit int, after string) (BatchList, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if after != "" {
		q.Set("after", after)
	}
	var out BatchList
	err := c.do(ctx, http.MethodGet, "/v1/batches", q, &out)
	return out, err
}

// Batch returns a batch's progress.
func (c *Client) Batch(ctx context.Context, code string) (Batch, error) {
	var out Batch
	err := c.do(ctx, http.MethodGet, "/v1/batches/"+url.PathEscape(code), nil, &out)
	return out, err
}

// CancelBatch ends a batch's waiting messages with the reason.
func (c *Client) CancelBatch(ctx context.Context, code, reason string) (CancelResult, error) {
	var out CancelResult
	err := c.do(ctx, http.MethodPost, "/v1/batches/"+url.PathEscape(code)+"/cancel", url.Values{"reason": {reason}}, &out)
	return out, err
}
