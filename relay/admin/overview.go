package admin

import (
	"crypto/subtle"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/loopback"
)

// Minute is what happened in one minute: how many of each activity
// (backends.Activity: ACCEPTED, SENT, DEFERRED, FAILED, INVALID, BOUNCED).
type Minute struct {
	At       time.Time      `json:"at"`
	Outcomes map[string]int `json:"outcomes"`
}

// Stats is the dashboard's overview.
type Stats struct {
	Counts map[string]int `json:"counts"`
	// SuspendedBatches are the batches an operator suspended, by name.
	SuspendedBatches []string `json:"suspended_batches"`
	// Minutes are the last hour's, oldest first, as the outbox counted
	// them: the same for every relay that shares it, and after a restart.
	Minutes []Minute `json:"minutes"`
}

// hourMinutes is how far back the charts go.
const hourMinutes = 60

// lastHour reads from the outbox what happened in each of the last 60
// minutes, oldest first, the current one last, with every activity (0
// where none).
func (a *api) lastHour(r *http.Request) ([]Minute, error) {
	start := time.Now().UTC().Truncate(time.Minute).Add(-(hourMinutes - 1) * time.Minute)
	counted, err := a.store.Minutes(r.Context(), start)
	if err != nil {
		return nil, err
	}
	out := make([]Minute, hourMinutes)
	for i := range out {
		out[i] = Minute{At: start.Add(time.Duration(i) * time.Minute), Outcomes: map[string]int{}}
		for _, act := range backends.Activities() {
			out[i].Outcomes[string(act)] = 0
		}
	}
	for _, m := range counted {
		if i := int(m.At.Sub(start) / time.Minute); i >= 0 && i < len(out) {
			for act, n := range m.Counts {
				out[i].Outcomes[string(act)] = n
			}
		}
	}
	return out, nil
}

// Recent are the messages that need a look, by kind ("failed", "bounced",
// "pec_not_delivered"), the latest change (a failure after a retry, say)
// first.
type Recent map[string][]Message

// ReadyCounts are the READY messages by what they wait for (Waiting*).
type ReadyCounts struct {
	Due       int `json:"due"`
	Deferred  int `json:"deferred"`
	Scheduled int `json:"scheduled"`
	Suspended int `json:"suspended"`
	// Counted is how many were looked at: the first recentScan in line
	// at most, fewer than READY holds when Partial.
	Counted int  `json:"counted"`
	Partial bool `json:"partial,omitempty"`
}

const (
	// recentScan bounds the newest messages the overview and a search by
	// recipient read: the dashboard is for what happens now; older mail
	// is found by its id or Message-ID.
	recentScan = 2000
	recentKeep = 10
)

// recentKind is the overview list a status belongs to, if any.
func recentKind() map[backends.Status]string {
	out := map[backends.Status]string{}
	for kind, outcomes := range map[string][]backends.Status{
		"failed":            {backends.StatusFailed},
		"bounced":           {backends.StatusBounced},
		"pec_not_delivered": {backends.StatusPECNotDelivered, backends.StatusPECNotAccepted},
	} {
		for _, o := range outcomes {
			calling, acked, _ := backends.CallbackStatuses(string(o))
			out[o], out[calling], out[acked] = kind, kind, kind
		}
	}
	return out
}

func (a *api) stats(w http.ResponseWriter, r *http.Request) {
	counts, err := a.store.Counts(r.Context())
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	out := Stats{Counts: map[string]int{}}
	for _, st := range backends.Statuses() {
		out.Counts[string(st)] = counts[st]
	}
	if out.Minutes, err = a.lastHour(r); err != nil {
		a.storeError(w, r, err)
		return
	}
	suspended, err := a.suspended(r)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	out.SuspendedBatches = slices.Sorted(maps.Keys(suspended))
	writeJSON(w, http.StatusOK, out)
}

// recentStats answers GET /v1/stats/recent: the latest messages of each
// overview list. Finding them reads up to recentScan messages, so it is
// apart from /v1/stats, which answers from counters; the dashboard asks for
// it when the counts say a list holds some.
func (a *api) recentStats(w http.ResponseWriter, r *http.Request) {
	counts, err := a.store.Counts(r.Context())
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	minutes, err := a.lastHour(r)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	out, err := a.recentLists(r, counts, minutes)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// suspended is the set of suspended batches.
func (a *api) suspended(r *http.Request) (map[string]bool, error) {
	codes, err := a.store.SuspendedBatches(r.Context())
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(codes))
	for _, c := range codes {
		out[c] = true
	}
	return out, nil
}

// readyStats answers GET /v1/stats/ready: why the READY messages wait. It
// reads up to recentScan of them, so it is apart from /v1/stats, which
// answers from counters; the dashboard asks for it when READY holds some.
func (a *api) readyStats(w http.ResponseWriter, r *http.Request) {
	counts, err := a.store.Counts(r.Context())
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	suspended, err := a.suspended(r)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	out, err := a.readyCounts(r, counts[backends.StatusReady], suspended)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	if out == nil {
		out = &ReadyCounts{}
	}
	writeJSON(w, http.StatusOK, out)
}

// readyReuse is how long a sorting of the READY messages is reused: it
// reads up to recentScan of them, which every open dashboard must not make
// the relay do at each refresh.
const readyReuse = 10 * time.Second

// readyCounts sorts the n READY messages by what they wait for, among the
// first recentScan in line.
func (a *api) readyCounts(r *http.Request, n int, suspended map[string]bool) (*ReadyCounts, error) {
	if n == 0 {
		return nil, nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.readyLast != nil && time.Since(a.readyAt) < readyReuse {
		return a.readyLast, nil
	}
	out := &ReadyCounts{}
	now := time.Now()
	err := a.scan(r, backends.StatusReady, func(m *backends.Message) bool {
		switch waiting(string(m.Status), m.Batch, m.Attempts, m.DueAt, suspended, now) {
		case WaitingSuspended:
			out.Suspended++
		case WaitingDeferred:
			out.Deferred++
		case WaitingScheduled:
			out.Scheduled++
		default:
			out.Due++
		}
		out.Counted++
		return true
	})
	out.Partial = out.Counted < n
	if err == nil {
		a.readyAt, a.readyLast = time.Now(), out
	}
	return out, err
}

// recentReuse bounds how long the overview's lists are reused while the
// counts of their statuses and the outcomes of the last hour stay the
// same (a message purged as another fails leaves them unchanged).
const recentReuse = time.Minute

// recentLists finds the messages of each overview list, the latest change
// first. The counts say how many there are to find: none, and no message
// is read; the same as at the last reading, with no outcome counted since
// (a message that failed again after a retry leaves the counts as they
// were, and counts as an outcome of its list), and that reading answers.
func (a *api) recentLists(r *http.Request, counts map[backends.Status]int, minutes []Minute) (Recent, error) {
	var key strings.Builder
	missing := 0
	for _, st := range backends.Statuses() {
		if _, ok := a.recent[st]; ok {
			key.WriteString(strconv.Itoa(counts[st]) + ",")
			missing += counts[st]
		}
	}
	// Only the outcomes of the lists count: the messages sent or
	// accepted each minute would make a busy relay read them all again
	// at every call.
	for _, m := range minutes {
		for _, o := range slices.Sorted(maps.Keys(m.Outcomes)) {
			if _, listed := a.recent[backends.Status(o)]; listed {
				key.WriteString(o + "=" + strconv.Itoa(m.Outcomes[o]) + ",")
			}
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.recentLast != nil && a.recentKey == key.String() && time.Since(a.recentAt) < recentReuse {
		return a.recentLast, nil
	}
	out := Recent{}
	for _, k := range a.recent {
		out[k] = []Message{}
	}
	// Newest first by creation, so every one among the newest is seen:
	// an older message that failed again is as recent as a new one.
	if missing > 0 {
		err := a.scan(r, "", func(m *backends.Message) bool {
			if k, ok := a.recent[m.Status]; ok {
				out[k] = append(out[k], messageView(m))
				missing--
			}
			return missing > 0
		})
		if err != nil {
			return nil, err
		}
	}
	for k, list := range out {
		slices.SortStableFunc(list, func(x, y Message) int { return y.UpdatedAt.Compare(x.UpdatedAt) })
		out[k] = list[:min(len(list), recentKeep)]
	}
	a.recentAt, a.recentKey, a.recentLast = time.Now(), key.String(), out
	return out, nil
}

// scan calls fn with the messages of a status in claim order, or with the
// newest messages first when status is empty, until fn says stop or
// recentScan messages were read.
func (a *api) scan(r *http.Request, status backends.Status, fn func(*backends.Message) bool) error {
	after := ""
	for read := 0; read < recentScan; {
		page, next, err := a.store.List(r.Context(), backends.ListQuery{Status: status, After: after, Limit: min(500, recentScan-read)})
		if err != nil {
			return err
		}
		for _, m := range page {
			if !fn(m) {
				return nil
			}
		}
		read += len(page)
		if next == "" {
			return nil
		}
		after = next
	}
	return nil
}

// search finds messages by id (X-Genro-Mail-ID), Message-ID, or recipient
// among the newest.
func (a *api) search(w http.ResponseWriter, r *http.Request) {
	q := strings.TrimSpace(r.URL.Query().Get("q"))
	if q == "" {
		writeError(w, http.StatusBadRequest, "q is empty: give a message id (X-Genro-Mail-ID), a Message-ID or a recipient address")
		return
	}
	out := MessageList{Messages: []Message{}}
	seen := map[string]bool{}
	add := func(m *backends.Message) {
		if !seen[m.ID] {
			seen[m.ID] = true
			out.Messages = append(out.Messages, messageView(m))
		}
	}
	if backends.CheckID(q) == nil {
		m, err := a.store.Get(r.Context(), q)
		switch {
		case err == nil:
			add(m)
		case !errors.Is(err, backends.ErrNotFound):
			a.storeError(w, r, err)
			return
		}
	}
	ms, err := a.store.ByMessageID(r.Context(), strings.Trim(q, "<>"))
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	for _, m := range ms {
		add(m)
	}
	// A Message-ID looks like an address too: scan the recipients of the
	// newest messages only when nothing answered to it.
	if len(out.Messages) == 0 && !strings.HasPrefix(q, "<") && strings.Contains(q, "@") {
		err := a.scan(r, "", func(m *backends.Message) bool {
			for _, rc := range m.Envelope.Recipients {
				if strings.EqualFold(rc, q) {
					add(m)
					break
				}
			}
			return len(out.Messages) < maxListLimit
		})
		if err != nil {
			a.storeError(w, r, err)
			return
		}
	}
	if err := a.markWaiting(r, out.Messages); err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// authorized tells whether r carries the token, or none is needed.
func authorized(token string, r *http.Request) bool {
	return token == "" || subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte("Bearer "+token)) == 1
}

// authorize asks for the token, when there is one, on everything but the
// probes and the dashboard's own files (which hold no data: the page asks
// for the token and sends it with each call). Without a token the API
// listens on loopback only, and answers only requests addressed to it: a
// page whose site name was pointed at 127.0.0.1 (DNS rebinding) passes as
// same-origin, but names its own host.
func authorize(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case token == "" && !loopback.Host(r.Host):
			writeError(w, http.StatusForbidden, "the admin API has no token, so it answers only requests addressed to "+
				"localhost or a loopback address, not %q: use http://127.0.0.1:<port>/, or set admin.token_file", r.Host)
			return
		case p == "/healthz", p == "/readyz", p == "/", strings.HasPrefix(p, "/ui/"):
		case !authorized(token, r):
			w.Header().Set("WWW-Authenticate", `Bearer realm="postino"`)
			writeError(w, http.StatusUnauthorized, "the admin API needs its token: send Authorization: Bearer <token> "+
				"(the token is in the file admin.token_file names, or in the variable admin.token_env names; postino commands read it "+
				"from the same POSTINO_ADMIN_TOKEN_FILE or POSTINO_ADMIN_TOKEN_ENV)")
			return
		}
		next.ServeHTTP(w, r)
	})
}
