package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/genropy/postino/backends"
	"github.com/genropy/postino/internal/testrig/logtest"
	"github.com/genropy/postino/relay/suppression"
)

// suppressionAPI serves the API over a fresh store, and a client of it.
func suppressionAPI(t *testing.T, store Store, opts Options) *Client {
	t.Helper()
	srv := httptest.NewServer(NewHandler(store, opts))
	t.Cleanup(srv.Close)
	return &Client{Base: srv.URL, Operator: "ann"}
}

func apiStatus(err error) int {
	var e *APIError
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}

func TestSuppressionAddShowRemove(t *testing.T) {
	ctx := context.Background()
	c := suppressionAPI(t, newStore(t), Options{})

	added, err := c.Suppress(ctx, NewSuppression{Address: "Bob@Example.COM", Scope: "news", Note: "asked by phone"})
	if err != nil || !added.Added || added.Entry.Key != "Bob@example.com" || added.Entry.Reason != backends.ReasonManual ||
		!added.Entry.Active || added.Entry.ChangedBy != "operator ann" {
		t.Fatalf("add: %+v, %v", added, err)
	}
	// Suppressed already: the entry stays as it was.
	again, err := c.Suppress(ctx, NewSuppression{Address: "Bob@example.com", Scope: "news", Reason: "complaint"})
	if err != nil || again.Added || again.Entry.Reason != backends.ReasonManual {
		t.Errorf("add again: %+v, %v", again, err)
	}
	for _, bad := range []NewSuppression{
		{Address: "nobody"}, {Address: "a@example.com", Scope: "bad scope"}, {Address: "a@example.com", Reason: "whim"},
		{Address: "a@example.com", Expires: time.Now().Add(-time.Hour)}, {Address: "a@example.com", Note: strings.Repeat("x", 501)},
	} {
		if _, err := c.Suppress(ctx, bad); apiStatus(err) != http.StatusBadRequest {
			t.Errorf("add %+v: %v, want a 400", bad, err)
		}
	}

	d, err := c.Suppression(ctx, "Bob@EXAMPLE.com")
	if err != nil || len(d.Entries) != 1 || len(d.History) != 1 || d.History[0].Note != "asked by phone" ||
		d.History[0].By != "operator ann" || d.History[0].Action != backends.ActionSuppressed {
		t.Fatalf("show: %+v, %v", d, err)
	}

	// The wrong scope: the answer names the one it has.
	_, err = c.Unsuppress(ctx, "Bob@example.com", "", "")
	if apiStatus(err) != http.StatusNotFound || !strings.Contains(err.Error(), "its entries are of scope news: give that scope") {
		t.Errorf("remove of scope *: %v", err)
	}
	if _, err := c.Unsuppress(ctx, "Bob@example.com", "news", "wrote to say it was a mistake"); err != nil {
		t.Fatal(err)
	}
	if _, err = c.Unsuppress(ctx, "Bob@example.com", "news", ""); apiStatus(err) != http.StatusNotFound ||
		!strings.Contains(err.Error(), "Bob@example.com is not on the suppression list") {
		t.Errorf("remove of a removed entry: %v", err)
	}
	d, err = c.Suppression(ctx, "Bob@example.com")
	if err != nil || len(d.Entries) != 0 || len(d.History) != 2 {
		t.Fatalf("show after the removal: %+v, %v", d, err)
	}
	if h := d.History[1]; h.Action != backends.ActionRemoved || h.Note != "wrote to say it was a mistake" || h.By != "operator ann" {
		t.Errorf("removal's history: %+v", h)
	}

	// The note in a JSON body, the operator unnamed.
	c.Operator = ""
	if _, err := c.Suppress(ctx, NewSuppression{Address: "carl@example.com"}); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodDelete, c.Base+"/v1/suppressions/carl@example.com", strings.NewReader(`{"note": "by body"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE with a body: %v %v", resp, err)
	}
	resp.Body.Close()
	if d, _ := c.Suppression(ctx, "carl@example.com"); d.History[1].Note != "by body" || d.History[1].By != "operator" {
		t.Errorf("history %+v", d.History)
	}
	if _, err := c.Suppression(ctx, "no-at-sign"); apiStatus(err) != http.StatusBadRequest {
		t.Errorf("show of a bad address: %v", err)
	}
}

func importText(t *testing.T, c *Client, text string) (ImportResult, error) {
	t.Helper()
	return c.ImportSuppressions(context.Background(), strings.NewReader(text), "")
}

func TestSuppressionListAndCounts(t *testing.T) {
	ctx := context.Background()
	c := suppressionAPI(t, newStore(t), Options{})
	file := "address,scope,reason\n"
	for i := range 5 {
		file += fmt.Sprintf("u%d@Example.com,*,hard_bounce\n", i)
	}
	file += "x@example.org,news,complaint\ny@example.org,,\n"
	if n, err := importText(t, c, file); err != nil || n.Imported != 7 {
		t.Fatalf("import: %+v, %v", n, err)
	}
	counts, err := c.SuppressionCounts(ctx)
	if err != nil || counts.Total != 7 || counts.Counts[backends.ReasonHardBounce] != 5 || counts.Counts[backends.ReasonComplaint] != 1 ||
		counts.Counts[backends.ReasonImport] != 1 || len(counts.Counts) != len(backends.SuppressionReasons()) {
		t.Errorf("counts %+v, %v", counts, err)
	}
	// Page by page, the domain of the prefix in any case.
	var got []string
	f := SuppressionFilter{Prefix: "u", Limit: 2}
	for {
		page, err := c.ListSuppressions(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range page.Entries {
			got = append(got, e.Key)
		}
		if page.Next == "" {
			break
		}
		f.After = page.Next
	}
	if strings.Join(got, " ") != "u0@example.com u1@example.com u2@example.com u3@example.com u4@example.com" {
		t.Errorf("pages: %v", got)
	}
	for _, tt := range []struct {
		f    SuppressionFilter
		want int
	}{
		{SuppressionFilter{Prefix: "u3@EXAMPLE"}, 1}, {SuppressionFilter{Reason: "complaint"}, 1}, {SuppressionFilter{Reason: "Hard_Bounce"}, 5},
		{SuppressionFilter{}, 7},
	} {
		if page, err := c.ListSuppressions(ctx, tt.f); err != nil || len(page.Entries) != tt.want {
			t.Errorf("list %+v: %d entries, %v; want %d", tt.f, len(page.Entries), err, tt.want)
		}
	}
	for _, f := range []SuppressionFilter{{Reason: "whim"}, {After: "!!"}, {After: "bm8tbnVs"}, {Limit: 5000}} {
		if _, err := c.ListSuppressions(ctx, f); apiStatus(err) != http.StatusBadRequest {
			t.Errorf("list %+v: %v, want a 400", f, err)
		}
	}
}

// TestSuppressionImport: a file is taken whole, or nothing of it, and
// the answer lists its bad lines.
func TestSuppressionImport(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	c := suppressionAPI(t, store, Options{MaxImportBytes: 1 << 10})
	_, err := importText(t, c, "email,reason\ngood@example.com,HardBounce\nbad-address,\nother@example.com,\n")
	if apiStatus(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "line 3: \"bad-address\" is not an address") {
		t.Fatalf("a bad line: %v", err)
	}
	if counts, _ := c.SuppressionCounts(ctx); counts.Total != 0 {
		t.Errorf("a file with a bad line wrote %+v", counts)
	}
	// For programs, the lines apart.
	resp, err := http.Post(c.Base+"/v1/suppressions/import", "text/csv", strings.NewReader("address\nx\ny\n"))
	if err != nil {
		t.Fatal(err)
	}
	var body ImportError
	json.NewDecoder(resp.Body).Decode(&body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || len(body.Lines) != 2 || body.Lines[1].Line != 3 {
		t.Errorf("%d %+v", resp.StatusCode, body)
	}
	if _, err := importText(t, c, "address\n"+strings.Repeat("someone@example.com\n", 100)); apiStatus(err) != http.StatusRequestEntityTooLarge {
		t.Errorf("a file past the limit: %v", err)
	}
	if _, err := importText(t, c, ""); apiStatus(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "the file is empty") {
		t.Errorf("an empty file: %v", err)
	}
	n, err := importText(t, c, "EmailAddress,Reason,LastUpdateTime\ngood@example.com,BOUNCE,2026-01-02T03:04:05Z\n")
	if err != nil || n.Imported != 1 {
		t.Fatalf("import: %+v, %v", n, err)
	}
	d, _ := c.Suppression(ctx, "good@example.com")
	if len(d.Entries) != 1 || d.Entries[0].Reason != backends.ReasonHardBounce || d.Entries[0].Created.Format(time.RFC3339) != "2026-01-02T03:04:05Z" ||
		len(d.History) != 1 || d.History[0].Action != backends.ActionImported || d.History[0].By != "operator ann" {
		t.Errorf("imported: %+v", d)
	}
}

// failingList fails the listings after the first ok ones.
type failingList struct {
	Store
	ok int
}

func (s *failingList) ListSuppressions(ctx context.Context, q backends.SuppressionQuery) ([]backends.Suppression, string, error) {
	if s.ok == 0 {
		return nil, "", errors.New("dial tcp db.internal:3306: connection refused")
	}
	s.ok--
	return s.Store.ListSuppressions(ctx, q)
}

func TestSuppressionExport(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	c := suppressionAPI(t, store, Options{})
	var file strings.Builder
	file.WriteString("address,scope,reason,created,expires\n")
	for i := range 2500 {
		fmt.Fprintf(&file, "u%04d@example.com,*,manual,2026-01-02T03:04:05Z,\n", i)
	}
	file.WriteString("z@example.com,news,complaint,2026-01-02T03:04:05Z,2027-01-02T03:04:05Z\n")
	if _, err := importText(t, c, file.String()); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := c.ExportSuppressions(ctx, &out, SuppressionFilter{}); err != nil {
		t.Fatal(err)
	}
	if out.String() != file.String() {
		t.Errorf("the export is not the file imported: %d bytes, want %d", out.Len(), file.Len())
	}
	out.Reset()
	if err := c.ExportSuppressions(ctx, &out, SuppressionFilter{Reason: "complaint"}); err != nil ||
		out.String() != "address,scope,reason,created,expires\nz@example.com,news,complaint,2026-01-02T03:04:05Z,2027-01-02T03:04:05Z\n" {
		t.Errorf("export of the complaints: %v\n%s", err, out.String())
	}

	// The store fails at once: an error answer, that names no host.
	log, logs := logtest.Logger()
	broken := suppressionAPI(t, &failingList{Store: store}, Options{Log: log})
	err := broken.ExportSuppressions(ctx, io.Discard, SuppressionFilter{})
	if apiStatus(err) != http.StatusServiceUnavailable || strings.Contains(err.Error(), "db.internal") || !strings.Contains(logs.String(), "db.internal") {
		t.Errorf("export of a store that is down: %v", err)
	}
	// Midway: the answer is cut short, and the client says so.
	broken = suppressionAPI(t, &failingList{Store: store, ok: 1}, Options{Log: log})
	out.Reset()
	err = broken.ExportSuppressions(ctx, &out, SuppressionFilter{})
	if err == nil || !strings.Contains(err.Error(), "the export was cut short") || out.Len() == 0 {
		t.Errorf("export that fails midway: %v, %d bytes", err, out.Len())
	}
}

func TestSuppressionCheck(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	c := suppressionAPI(t, store, Options{})
	if _, err := importText(t, c, "address,scope,reason\nann@example.com,news,manual\nbob@example.com,*,unsubscribe\n"); err != nil {
		t.Fatal(err)
	}
	policy := suppression.New(suppression.Config{Streams: map[string]suppression.Stream{
		"news":   {Bulk: true, Mode: suppression.ModeRecord},
		"alerts": {Mode: suppression.ModeRecord, Blocks: []backends.SuppressionReason{backends.ReasonManual}},
	}}, store)
	withPolicy := suppressionAPI(t, store, Options{Policy: policy})
	tests := []struct {
		c       *Client
		addr    string
		stream  string
		blocked bool
	}{
		{c, "ann@example.com", "news", true},
		{c, "ann@example.com", "", false},
		{c, "bob@EXAMPLE.com", "", true},
		{c, "Bob@example.com", "news", false}, // the local part as received
		{withPolicy, "bob@example.com", "news", true},
		// alerts are held back by manual entries alone.
		{withPolicy, "bob@example.com", "alerts", false},
	}
	for _, tt := range tests {
		got, err := tt.c.CheckSuppression(ctx, tt.addr, tt.stream)
		if err != nil || got.Blocked != tt.blocked || len(got.Entries) != len(got.Why) {
			t.Errorf("check %s %q: %+v, %v; want blocked %v", tt.addr, tt.stream, got, err, tt.blocked)
		}
	}
	got, _ := c.CheckSuppression(ctx, "ann@example.com", "news")
	if len(got.Why) != 1 || !strings.HasPrefix(got.Why[0], "suppressed for stream news since ") {
		t.Errorf("why: %v", got.Why)
	}
	if _, err := withPolicy.CheckSuppression(ctx, "bob@example.com", "unknown"); apiStatus(err) != http.StatusBadRequest ||
		!strings.Contains(err.Error(), `no stream "unknown" is configured`) {
		t.Errorf("check of an unknown stream: %v", err)
	}
	if _, err := c.CheckSuppression(ctx, "bob@example.com", "bad stream"); apiStatus(err) != http.StatusBadRequest {
		t.Errorf("check of a bad stream name: %v", err)
	}
}

// TestSuppressionImportChunks: a file of more entries than one chunk is
// written whole; one whose last line is bad writes nothing, though more
// than a chunk of good lines come before it.
func TestSuppressionImportChunks(t *testing.T) {
	ctx := context.Background()
	c := suppressionAPI(t, newStore(t), Options{})
	n := 2*importChunk + 7
	var file strings.Builder
	file.WriteString("address,reason\n")
	for i := range n {
		fmt.Fprintf(&file, "user%d@example.com,manual\n", i)
	}
	if _, err := importText(t, c, file.String()+"not-an-address,manual\n"); apiStatus(err) != http.StatusBadRequest ||
		!strings.Contains(err.Error(), fmt.Sprintf("line %d:", n+2)) {
		t.Fatalf("a bad last line: %v", err)
	}
	if counts, _ := c.SuppressionCounts(ctx); counts.Total != 0 {
		t.Fatalf("a file with a bad last line wrote %+v", counts)
	}
	got, err := importText(t, c, file.String())
	if err != nil || got.Imported != n {
		t.Fatalf("import: %+v, %v; want %d", got, err, n)
	}
	if counts, _ := c.SuppressionCounts(ctx); counts.Total != n {
		t.Errorf("counts %+v, want %d entries", counts, n)
	}
	for _, addr := range []string{"user0@example.com", fmt.Sprintf("user%d@example.com", n-1)} {
		if d, err := c.Suppression(ctx, addr); err != nil || len(d.Entries) != 1 {
			t.Errorf("%s: %+v, %v", addr, d, err)
		}
	}
}
