package delivery

import (
	"bufio"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/emersion/go-message/textproto"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/outcome"
	"github.com/genropy/postino/relay/suppression"
)

// Holder holds back the recipients the suppression list holds
// (suppression.Policy).
type Holder interface {
	// StreamOf is m's stream.
	StreamOf(m *backends.Message, route string) string
	// Hold marks the pending recipients of results that the list holds
	// back from stream.
	Hold(ctx context.Context, stream string, results []outcome.Recipient, now time.Time) ([]outcome.Recipient, int, error)
}

// Findings adds what delivery learns of addresses to the suppression list
// (suppression.Policy).
type Findings interface {
	// Hard records a hard verdict on addr.
	Hard(ctx context.Context, addr string, ev suppression.Evidence, now time.Time) (backends.Suppression, error)
}

// Unsubscribes makes the one-click unsubscribe fields (RFC 8058) of the
// messages of bulk streams.
type Unsubscribes interface {
	// Bulk reports whether a stream's messages get the fields.
	Bulk(stream string) bool
	// Fields are a recipient's List-Unsubscribe and List-Unsubscribe-Post
	// header fields, each line ending in CRLF.
	Fields(stream, recipient, messageID string) []byte
}

// Brake counts the outcomes of batches' messages (brake.Brake).
type Brake interface {
	Count(batch, messageID string, t backends.BatchTally)
	// Stopped reports whether the brake stopped the batch.
	Stopped(batch string) bool
}

// countBatch counts, for the brake, the recipients of the attempt
// accepted and those with a hard verdict.
func (e *Engine) countBatch(f *flight) {
	if e.cfg.Brake == nil || f.m.Batch == "" {
		return
	}
	var t backends.BatchTally
	for _, i := range f.tried {
		switch r := f.results[i]; {
		case r.Status == outcome.RecipientSent:
			t.Sent++
		case r.Status == outcome.RecipientFailed && r.Verdict == outcome.VerdictHard:
			t.Hard++
		}
	}
	e.cfg.Brake.Count(f.m.Batch, f.m.ID, t)
}

// holdBack reads the suppression list for the pending recipients of the
// flights, one lookup for those of each stream, and marks those it holds
// back. The flights of a stream whose lookup failed are returned.
func (e *Engine) holdBack(flights []*flight) (failed []*flight, err error) {
	byStream := map[string][]*flight{}
	var streams []string
	for _, f := range flights {
		f.stream = e.cfg.Holds.StreamOf(f.m, "")
		if _, ok := byStream[f.stream]; !ok {
			streams = append(streams, f.stream)
		}
		byStream[f.stream] = append(byStream[f.stream], f)
	}
	now := time.Now().UTC()
	for _, stream := range streams {
		fs := byStream[stream]
		var all []outcome.Recipient
		for _, f := range fs {
			all = append(all, f.results...)
		}
		held, _, herr := e.cfg.Holds.Hold(context.Background(), stream, all, now)
		if herr != nil {
			failed, err = append(failed, fs...), herr
			continue
		}
		for _, f := range fs {
			f.results, held = held[:len(f.results):len(f.results)], held[len(f.results):]
		}
	}
	return failed, err
}

// bulkFields returns, for a message of a bulk stream, the fields each
// recipient's copy gets, signed with it; nil for another message, or one
// whose app wrote List-Unsubscribe itself: the app's are kept, and signed.
func (e *Engine) bulkFields(f *flight) func(rcpt string) []byte {
	u := e.cfg.Unsubscribes
	if u == nil || !u.Bulk(f.stream) || e.hasUnsubscribe(f.m) {
		return nil
	}
	stream, id := f.stream, f.m.ID
	return func(rcpt string) []byte { return u.Fields(stream, rcpt, id) }
}

// hasUnsubscribe reports whether the message's header holds
// List-Unsubscribe or List-Unsubscribe-Post: the app's are kept, never
// doubled. A file that cannot be read says no: its attempt fails
// as it would have.
func (e *Engine) hasUnsubscribe(m *backends.Message) bool {
	r, err := e.spool.Open(m.EmlPath)
	if err != nil {
		return false
	}
	defer r.Close()
	h, err := textproto.ReadHeader(bufio.NewReader(r))
	return err == nil && (h.Has("List-Unsubscribe") || h.Has("List-Unsubscribe-Post"))
}

// launchHeld dispatches the flights once the suppression list is read;
// those whose lookup failed hand their messages back, the attempt
// uncounted.
func (e *Engine) launchHeld(flights []*flight) {
	failed, err := e.holdBack(flights)
	for _, f := range flights {
		if slices.Contains(failed, f) {
			e.log.Error("delivery: cannot read the suppression list; the message is handed back and tried again", "id", f.m.ID, "error", err)
			f.handedBack, f.retryIn = "the suppression list could not be read: "+err.Error(), e.cfg.Poll
			f.finish()
			continue
		}
		e.launch(f, e.bulkFields(f))
	}
}

// recordFindings adds to the suppression list the hard verdicts of the
// attempt: each recipient it refused for good because the address is bad.
// The outcome is recorded already; a finding that cannot be written is
// logged, and the address's next refusal brings it again.
func (e *Engine) recordFindings(f *flight, now time.Time) {
	if e.cfg.Findings == nil {
		return
	}
	for _, i := range f.tried {
		r := f.results[i]
		if r.Status != outcome.RecipientFailed || r.Verdict != outcome.VerdictHard {
			continue
		}
		ev := suppression.Evidence{MessageID: f.m.ID, Code: fmt.Sprintf("%d %s", r.Code, r.EnhancedCode), Diagnostic: r.Text}
		if _, err := e.cfg.Findings.Hard(context.Background(), r.Address, ev, now); err != nil {
			e.log.Error("delivery: cannot add a hard verdict to the suppression list", "id", f.m.ID, "recipient", r.Address, "error", err)
		}
	}
}
