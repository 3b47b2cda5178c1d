package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/text"
	"github.com/genropy/postino/relay/suppression"
)

// Policy says which entries of the list hold a stream's mail back: the
// relay's suppression policy (suppression.Policy).
type Policy interface {
	Known(stream string) bool
	Blocking(ctx context.Context, stream string, addrs []string, now time.Time) ([]backends.Suppression, error)
}

// HeaderOperator names the operator who makes a change, for the list's
// history: "operator NAME".
const HeaderOperator = "X-Postino-Operator"

// maxNote bounds an operator's note, in bytes.
const maxNote = 500

// SuppressionList is a page of entries.
type SuppressionList struct {
	Entries []backends.Suppression `json:"entries"`
	// Next is the cursor of the next page, empty on the last.
	Next string `json:"next,omitempty"`
}

// SuppressionCounts counts the active entries by reason, every reason
// named.
type SuppressionCounts struct {
	Counts map[backends.SuppressionReason]int `json:"counts"`
	Total  int                                `json:"total"`
}

// SuppressionDetail is an address's entries, of every scope, the ones
// not active yet included, and its history, oldest first.
type SuppressionDetail struct {
	Address string                      `json:"address"`
	Key     string                      `json:"key"`
	Entries []backends.Suppression      `json:"entries"`
	History []backends.SuppressionEvent `json:"history"`
}

// SuppressionCheck says whether mail of a stream to an address would be
// held back now, and by which entries.
type SuppressionCheck struct {
	Address string                 `json:"address"`
	Stream  string                 `json:"stream"`
	Blocked bool                   `json:"blocked"`
	Entries []backends.Suppression `json:"entries"`
	// Why explains each entry, as the message's history would.
	Why []string `json:"why"`
}

// NewSuppression is an operator's entry.
type NewSuppression struct {
	Address string `json:"address"`
	// Scope is a stream, or "*" (the default): every stream.
	Scope string `json:"scope,omitempty"`
	// Reason defaults to manual.
	Reason  string    `json:"reason,omitempty"`
	Expires time.Time `json:"expires,omitzero"`
	Note    string    `json:"note,omitempty"`
}

// AddedSuppression is the entry an operator's addition left: Added is
// false when the address was suppressed already, and the entry is the one
// that was there.
type AddedSuppression struct {
	Added bool                 `json:"added"`
	Entry backends.Suppression `json:"entry"`
}

// RemovedSuppression is the entry an operator removed.
type RemovedSuppression struct {
	Address string `json:"address"`
	Scope   string `json:"scope"`
}

// ImportResult counts the entries an import wrote.
type ImportResult struct {
	Imported int `json:"imported"`
}

// ImportError is the answer to a file with bad lines: Error says it all,
// Lines and More are it for a program.
type ImportError struct {
	Error string                  `json:"error"`
	Lines []suppression.LineError `json:"lines"`
	More  int                     `json:"more,omitempty"`
}

func (a *api) suppressionRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/suppressions", a.listSuppressions)
	mux.HandleFunc("GET /v1/suppressions/counts", a.suppressionCounts)
	mux.HandleFunc("GET /v1/suppressions/export", a.exportSuppressions)
	mux.HandleFunc("POST /v1/suppressions/import", a.importSuppressions)
	mux.HandleFunc("POST /v1/suppressions", a.addSuppression)
	mux.HandleFunc("GET /v1/suppressions/{address}", a.showSuppression)
	mux.HandleFunc("GET /v1/suppressions/{address}/check", a.checkSuppression)
	mux.HandleFunc("DELETE /v1/suppressions/{address}", a.removeSuppression)
}

// suppressionQuery reads the selection of the list and the export:
// prefix (of the key: its domain is matched in any case), reason, after
// and limit.
func suppressionQuery(r *http.Request, limit int) (backends.SuppressionQuery, error) {
	v := r.URL.Query()
	q := backends.SuppressionQuery{Prefix: strings.TrimSpace(v.Get("prefix"))}
	if at := strings.LastIndexByte(q.Prefix, '@'); at >= 0 {
		q.Prefix = q.Prefix[:at] + strings.ToLower(q.Prefix[at:])
	}
	if s := v.Get("reason"); s != "" {
		reason, err := backends.ParseSuppressionReason(s)
		if err != nil {
			return q, err
		}
		q.Reason = reason
	}
	if s := v.Get("after"); s != "" {
		b, err := base64.RawURLEncoding.DecodeString(s)
		if err != nil {
			return q, fmt.Errorf("after %q is not a cursor this API gave: list again without it", s)
		}
		q.After = string(b)
	}
	var err error
	q.Limit, err = listLimit(r, limit)
	return q, err
}

func (a *api) listSuppressions(w http.ResponseWriter, r *http.Request) {
	q, err := suppressionQuery(r, defaultListLimit)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	entries, next, err := a.store.ListSuppressions(r.Context(), q)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	out := SuppressionList{Entries: entries}
	if out.Entries == nil {
		out.Entries = []backends.Suppression{}
	}
	if next != "" {
		out.Next = base64.RawURLEncoding.EncodeToString([]byte(next))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) suppressionCounts(w http.ResponseWriter, r *http.Request) {
	counts, err := a.store.SuppressionCounts(r.Context())
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	out := SuppressionCounts{Counts: map[backends.SuppressionReason]int{}}
	for _, reason := range backends.SuppressionReasons() {
		out.Counts[reason] = counts[reason]
		out.Total += counts[reason]
	}
	writeJSON(w, http.StatusOK, out)
}

// addressOf reads the address of the path, and its key; a bad one is
// answered.
func addressOf(w http.ResponseWriter, r *http.Request) (string, string, bool) {
	addr := r.PathValue("address")
	key, err := backends.SuppressionKey(addr)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return "", "", false
	}
	return addr, key, true
}

func (a *api) showSuppression(w http.ResponseWriter, r *http.Request) {
	addr, key, ok := addressOf(w, r)
	if !ok {
		return
	}
	out := SuppressionDetail{Address: addr, Key: key}
	var err error
	if out.Entries, err = a.store.SuppressionsOf(r.Context(), addr); err != nil {
		a.storeError(w, r, err)
		return
	}
	if out.History, err = a.store.SuppressionHistory(r.Context(), addr); err != nil {
		a.storeError(w, r, err)
		return
	}
	if out.Entries == nil {
		out.Entries = []backends.Suppression{}
	}
	if out.History == nil {
		out.History = []backends.SuppressionEvent{}
	}
	writeJSON(w, http.StatusOK, out)
}

// checkSuppression answers whether mail of ?stream= (transactional by
// default) to the address would be held back now.
func (a *api) checkSuppression(w http.ResponseWriter, r *http.Request) {
	addr, _, ok := addressOf(w, r)
	if !ok {
		return
	}
	stream := r.URL.Query().Get("stream")
	if stream == "" {
		stream = suppression.Transactional
	}
	if err := backends.CheckStream(stream); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	now := time.Now().UTC()
	var entries []backends.Suppression
	var err error
	switch {
	case a.opts.Policy == nil:
		// Without the relay's policy, every reason blocks, as it does on
		// a stream that names none.
		entries, err = a.store.Suppressed(r.Context(), stream, []string{addr}, now)
	case !a.opts.Policy.Known(stream):
		writeError(w, http.StatusBadRequest, "no stream %q is configured: name one of the streams: section, or %s", stream, suppression.Transactional)
		return
	default:
		entries, err = a.opts.Policy.Blocking(r.Context(), stream, []string{addr}, now)
	}
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	out := SuppressionCheck{Address: addr, Stream: stream, Blocked: len(entries) > 0, Entries: entries, Why: []string{}}
	if out.Entries == nil {
		out.Entries = []backends.Suppression{}
	}
	for _, e := range entries {
		out.Why = append(out.Why, suppression.Explain(e))
	}
	writeJSON(w, http.StatusOK, out)
}

// operator is who makes a change: "operator" and the name the client
// gives in HeaderOperator, its control characters left out.
func operator(r *http.Request) string {
	name := strings.Map(func(c rune) rune {
		if unicode.IsControl(c) || c == utf8.RuneError {
			return -1
		}
		return c
	}, r.Header.Get(HeaderOperator))
	name = strings.TrimSpace(name)
	name = text.Cut(name, 64)
	if name == "" {
		return "operator"
	}
	return "operator " + name
}

func checkNote(note string) error {
	if len(note) > maxNote {
		return fmt.Errorf("the note has %d bytes: keep it within %d", len(note), maxNote)
	}
	return nil
}

// readJSON decodes a request's JSON body into v; an empty body leaves v
// as it is when optional.
func readJSON(r *http.Request, v any, optional bool) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) {
		if optional {
			return nil
		}
		return errors.New("the request has no body: send the JSON object")
	}
	if err != nil {
		return fmt.Errorf("the body is not the JSON this call takes: %w", err)
	}
	return nil
}

// addSuppression suppresses an address for an operator: at once, until
// the entry expires or an operator removes it. An address suppressed
// already keeps its entry (201 for a new entry, 200 for that).
func (a *api) addSuppression(w http.ResponseWriter, r *http.Request) {
	var in NewSuppression
	if err := readJSON(r, &in, false); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if err := checkNote(in.Note); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	reason := backends.ReasonManual
	if in.Reason != "" {
		var err error
		if reason, err = backends.ParseSuppressionReason(in.Reason); err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
	}
	now := time.Now().UTC()
	if !in.Expires.IsZero() && !in.Expires.After(now) {
		writeError(w, http.StatusBadRequest, "expires %s has passed: give a later time, or none for an entry that does not expire",
			in.Expires.Format(time.RFC3339))
		return
	}
	by := operator(r)
	c := backends.SuppressionChange{Entry: backends.Suppression{Address: strings.TrimSpace(in.Address), Scope: in.Scope, Reason: reason,
		Diagnostic: in.Note, Created: now, Expires: in.Expires.UTC()}, By: by, Need: 1}
	if err := c.Check(); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	// Whether the address was suppressed already, to tell the operator:
	// the store keeps the entry there as it is.
	had, err := a.store.Suppressed(r.Context(), c.Entry.Scope, []string{c.Entry.Address}, now)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	e, err := a.store.Suppress(r.Context(), c)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	out := AddedSuppression{Added: !slices.ContainsFunc(had, func(h backends.Suppression) bool { return h.Scope == e.Scope }), Entry: e}
	code := http.StatusOK
	if out.Added {
		code = http.StatusCreated
		a.opts.Log.Info("suppression added", "address", e.Address, "scope", e.Scope, "reason", e.Reason, "by", by)
	}
	writeJSON(w, code, out)
}

// removeSuppression removes the entry of the address and ?scope= (every
// stream's, "*", by default), with the operator's note, from ?note= or a
// JSON body {"note": …}.
func (a *api) removeSuppression(w http.ResponseWriter, r *http.Request) {
	addr, _, ok := addressOf(w, r)
	if !ok {
		return
	}
	body := struct {
		Note string `json:"note"`
	}{Note: r.URL.Query().Get("note")}
	if err := readJSON(r, &body, true); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if err := checkNote(body.Note); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	scope := r.URL.Query().Get("scope")
	if scope == "" {
		scope = backends.ScopeAll
	}
	if scope != backends.ScopeAll {
		if err := backends.CheckStream(scope); err != nil {
			writeError(w, http.StatusBadRequest, "scope: %v", err)
			return
		}
	}
	rm := backends.SuppressionRemoval{Address: addr, Scope: scope, By: operator(r), Note: body.Note, At: time.Now().UTC()}
	err := a.store.Unsuppress(r.Context(), rm)
	if errors.Is(err, backends.ErrNotFound) {
		a.notSuppressed(w, r, addr, scope)
		return
	}
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.opts.Log.Info("suppression removed", "address", addr, "scope", scope, "by", rm.By)
	writeJSON(w, http.StatusOK, RemovedSuppression{Address: addr, Scope: scope})
}

// notSuppressed answers the removal of an entry that is not there,
// naming the scopes the address has entries of.
func (a *api) notSuppressed(w http.ResponseWriter, r *http.Request, addr, scope string) {
	entries, err := a.store.SuppressionsOf(r.Context(), addr)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	if len(entries) == 0 {
		writeError(w, http.StatusNotFound, "%s is not on the suppression list", addr)
		return
	}
	scopes := make([]string, len(entries))
	for i, e := range entries {
		scopes[i] = e.Scope
	}
	writeError(w, http.StatusNotFound, "%s has no entry of scope %s; its entries are of scope %s: give that scope",
		addr, scope, strings.Join(scopes, ", "))
}

// importChunk is how many entries an import hands the outbox at once.
// The file is read twice, once to check every line and once to write,
// from a temporary file (TMPDIR), so that the relay holds a chunk of its
// entries, not the file: under the relay's memory limit (a sidecar's), a
// million entries in memory, or the file's 70 MB, had it collecting
// garbage for most of the import, three times as long.
const importChunk = 10000

// importSuppressions takes a CSV file whole, or nothing of it.
func (a *api) importSuppressions(w http.ResponseWriter, r *http.Request) {
	now := time.Now().UTC()
	scope := r.URL.Query().Get("scope")
	if scope != "" && scope != backends.ScopeAll {
		if err := backends.CheckStream(scope); err != nil {
			writeError(w, http.StatusBadRequest, "scope: %v", err)
			return
		}
	}
	file, err := os.CreateTemp("", "postino-import-*.csv")
	if err != nil {
		a.internalError(w, r, "the file cannot be kept while it is checked (TMPDIR)", err)
		return
	}
	defer os.Remove(file.Name())
	defer file.Close()
	csvImport := suppression.CSVImport{MaxBytes: a.opts.MaxImportBytes, Scope: scope}
	total := 0
	err = csvImport.Each(io.TeeReader(r.Body, file), now, func(backends.Suppression) error {
		total++
		return nil
	})
	var bad *suppression.CSVError
	switch {
	case errors.As(err, &bad):
		writeJSON(w, http.StatusBadRequest, ImportError{Error: err.Error(), Lines: bad.Lines, More: bad.More})
		return
	case errors.Is(err, suppression.ErrCSVTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "%v", err)
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, "the file was not imported: %v", err)
		return
	}
	by := operator(r)
	imported := 0
	chunk := make([]backends.Suppression, 0, min(total, importChunk))
	write := func() error {
		if err := backends.PrepareImport(chunk, by, now); err != nil {
			return err
		}
		if err := a.store.ImportSuppressions(r.Context(), chunk, by); err != nil {
			return err
		}
		imported += len(chunk)
		chunk = chunk[:0]
		return nil
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		a.internalError(w, r, "the file kept while it was checked cannot be read again (TMPDIR)", err)
		return
	}
	err = csvImport.Each(file, now, func(e backends.Suppression) error {
		if chunk = append(chunk, e); len(chunk) < importChunk {
			return nil
		}
		return write()
	})
	if err == nil && len(chunk) > 0 {
		err = write()
	}
	if err != nil {
		a.internalError(w, r, fmt.Sprintf("the outbox failed after %d of the file's %d entries were imported "+
			"(an import run again ends the same)", imported, total), err)
		return
	}
	a.opts.Log.Info("suppressions imported", "count", imported, "by", by)
	writeJSON(w, http.StatusOK, ImportResult{Imported: imported})
}

// exportSuppressions writes the active entries ?prefix= and ?reason=
// select as CSV, reading them a page at a time.
func (a *api) exportSuppressions(w http.ResponseWriter, r *http.Request) {
	q, err := suppressionQuery(r, 0)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	q.After = ""
	h := w.Header()
	h.Set("Content-Type", "text/csv; charset=utf-8")
	h.Set("Content-Disposition", `attachment; filename="suppressions.csv"`)
	out := &sentWriter{w: w}
	err = suppression.WriteCSV(out, suppression.All(r.Context(), a.store, q))
	switch {
	case err == nil:
	case !out.sent:
		h.Del("Content-Disposition")
		a.storeError(w, r, err)
	default:
		// The answer has begun: it is cut short, for the client to see
		// that it is not whole.
		a.opts.Log.Error("admin API: the export failed midway", "error", err)
		panic(http.ErrAbortHandler)
	}
}

// sentWriter records whether anything was written.
type sentWriter struct {
	w    io.Writer
	sent bool
}

func (s *sentWriter) Write(p []byte) (int, error) {
	s.sent = true
	return s.w.Write(p)
}
