package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Client talks to a running relay's admin API.
type Client struct {
	// Base is the API's address: http://127.0.0.1:8525, or host:port.
	Base string
	// Token is the admin token, when the relay asks for one.
	Token string
	// Operator names who makes the changes, in the suppression list's
	// history.
	Operator string
	HTTP     *http.Client
}

// APIError is an error answer of the API.
type APIError struct {
	StatusCode int
	Message    string
}

func (e *APIError) Error() string { return e.Message }

func (c *Client) url(path string, q url.Values) string {
	base := c.Base
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	u := strings.TrimRight(base, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, out any) error {
	return c.send(ctx, method, path, q, nil, "", out)
}

// request makes a call; an answer that is not a 2xx is an *APIError. The
// caller closes the body of the answer it gets.
func (c *Client) request(ctx context.Context, method, path string, q url.Values, body io.Reader, contentType string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, q), body)
	if err != nil {
		return nil, err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if c.Operator != "" {
		req.Header.Set(HeaderOperator, c.Operator)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the relay's admin API at %s (is postino serve running? see --admin): %w", c.Base, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	var e Error
	if b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20)); err == nil && json.Unmarshal(b, &e) == nil && e.Error != "" {
		return nil, &APIError{StatusCode: resp.StatusCode, Message: e.Error}
	}
	return nil, &APIError{StatusCode: resp.StatusCode, Message: fmt.Sprintf("%s %s: %s", method, path, resp.Status)}
}

// send makes a call with a body (nil: none) and decodes its answer into
// out: JSON, or the bytes themselves into a *[]byte.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, body io.Reader, contentType string, out any) error {
	resp, err := c.request(ctx, method, path, q, body, contentType)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read answer of %s %s: %w", method, path, err)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = b
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("answer of %s %s is not what this client expects (a different postino version?): %w", method, path, err)
	}
	return nil
}

// Ready asks the relay whether it takes and sends mail; not ready is an
// *APIError saying why.
func (c *Client) Ready(ctx context.Context) (Readiness, error) {
	var out Readiness
	err := c.do(ctx, http.MethodGet, "/readyz", nil, &out)
	return out, err
}

// Stats returns the dashboard's overview.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var out Stats
	err := c.do(ctx, http.MethodGet, "/v1/stats", nil, &out)
	return out, err
}

// Recent returns the latest messages of each overview list.
func (c *Client) Recent(ctx context.Context) (Recent, error) {
	var out Recent
	err := c.do(ctx, http.MethodGet, "/v1/stats/recent", nil, &out)
	return out, err
}

// Search finds messages by id, Message-ID or recipient.
func (c *Client) Search(ctx context.Context, q string) (MessageList, error) {
	var out MessageList
	err := c.do(ctx, http.MethodGet, "/v1/search", url.Values{"q": {q}}, &out)
	return out, err
}

// List returns a page of messages; status may be empty.
func (c *Client) List(ctx context.Context, f ListFilter) (MessageList, error) {
	q := url.Values{}
	for k, v := range map[string]string{"status": f.Status, "batch": f.Batch, "after": f.After} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out MessageList
	err := c.do(ctx, http.MethodGet, "/v1/messages", q, &out)
	return out, err
}

// ListFilter selects the messages List returns: in a status, of a batch,
// a page of at most Limit after the cursor After.
type ListFilter struct {
	Status, Batch string
	Limit         int
	After         string
}

// Get returns a message with its history.
func (c *Client) Get(ctx context.Context, id string) (Message, error) {
	var out Message
	err := c.do(ctx, http.MethodGet, "/v1/messages/"+url.PathEscape(id), nil, &out)
	return out, err
}

// Receipts lists the receipts kept with a message.
func (c *Client) Receipts(ctx context.Context, id string) (ReceiptList, error) {
	var out ReceiptList
	err := c.do(ctx, http.MethodGet, "/v1/messages/"+url.PathEscape(id)+"/receipts", nil, &out)
	return out, err
}

// Receipt returns one receipt as it came.
func (c *Client) Receipt(ctx context.Context, id, name string) ([]byte, error) {
	var out []byte
	err := c.do(ctx, http.MethodGet, "/v1/messages/"+url.PathEscape(id)+"/receipts/"+url.PathEscape(name), nil, &out)
	return out, err
}

// Retry sends a message on its way again; now makes it due now even when
// the app scheduled it for later (X-Postino-Send-After).
func (c *Client) Retry(ctx context.Context, id string, now bool) (Message, error) {
	var q url.Values
	if now {
		q = url.Values{"now": {"true"}}
	}
	var out Message
	err := c.do(ctx, http.MethodPost, "/v1/messages/"+url.PathEscape(id)+"/retry", q, &out)
	return out, err
}

func (c *Client) Cancel(ctx context.Context, id string) (Message, error) {
	var out Message
	err := c.do(ctx, http.MethodPost, "/v1/messages/"+url.PathEscape(id)+"/cancel", nil, &out)
	return out, err
}

func (c *Client) SuspendBatch(ctx context.Context, code string) error {
	return c.do(ctx, http.MethodPost, "/v1/batches/"+url.PathEscape(code)+"/suspend", nil, nil)
}

func (c *Client) ActivateBatch(ctx context.Context, code string) error {
	return c.do(ctx, http.MethodPost, "/v1/batches/"+url.PathEscape(code)+"/activate", nil, nil)
}

// Events lists events in a state (parked when empty).
func (c *Client) Events(ctx context.Context, state string, limit int) (EventList, error) {
	q := url.Values{}
	if state != "" {
		q.Set("state", state)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out EventList
	err := c.do(ctx, http.MethodGet, "/v1/events", q, &out)
	return out, err
}

// Replay sends a parked event to the plugins again.
func (c *Client) Replay(ctx context.Context, id string) (Event, error) {
	var out Event
	err := c.do(ctx, http.MethodPost, "/v1/events/"+url.PathEscape(id)+"/replay", nil, &out)
	return out, err
}

// SuppressionFilter selects entries of the list.
type SuppressionFilter struct {
	// Prefix of the address; its domain is matched in any case.
	Prefix string
	// Reason, when set, keeps the entries of that reason.
	Reason string
	// After is the Next of the page before; Limit the page's size.
	After string
	Limit int
}

func (f SuppressionFilter) values() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"prefix": f.Prefix, "reason": f.Reason, "after": f.After} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// ListSuppressions returns a page of the list's active entries.
func (c *Client) ListSuppressions(ctx context.Context, f SuppressionFilter) (SuppressionList, error) {
	var out SuppressionList
	err := c.do(ctx, http.MethodGet, "/v1/suppressions", f.values(), &out)
	return out, err
}

// SuppressionCounts counts the active entries by reason.
func (c *Client) SuppressionCounts(ctx context.Context) (SuppressionCounts, error) {
	var out SuppressionCounts
	err := c.do(ctx, http.MethodGet, "/v1/suppressions/counts", nil, &out)
	return out, err
}

// Suppression returns an address's entries and history.
func (c *Client) Suppression(ctx context.Context, addr string) (SuppressionDetail, error) {
	var out SuppressionDetail
	err := c.do(ctx, http.MethodGet, "/v1/suppressions/"+url.PathEscape(addr), nil, &out)
	return out, err
}

// CheckSuppression says whether mail of stream (transactional when empty)
// to addr would be held back now.
func (c *Client) CheckSuppression(ctx context.Context, addr, stream string) (SuppressionCheck, error) {
	var q url.Values
	if stream != "" {
		q = url.Values{"stream": {stream}}
	}
	var out SuppressionCheck
	err := c.do(ctx, http.MethodGet, "/v1/suppressions/"+url.PathEscape(addr)+"/check", q, &out)
	return out, err
}

// Suppress adds an operator's entry.
func (c *Client) Suppress(ctx context.Context, s NewSuppression) (AddedSuppression, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return AddedSuppression{}, err
	}
	var out AddedSuppression
	err = c.send(ctx, http.MethodPost, "/v1/suppressions", nil, bytes.NewReader(b), "application/json", &out)
	return out, err
}

// Unsuppress removes the entry of addr and scope ("*" when empty), with
// the operator's note.
func (c *Client) Unsuppress(ctx context.Context, addr, scope, note string) (RemovedSuppression, error) {
	q := url.Values{}
	if scope != "" {
		q.Set("scope", scope)
	}
	if note != "" {
		q.Set("note", note)
	}
	var out RemovedSuppression
	err := c.do(ctx, http.MethodDelete, "/v1/suppressions/"+url.PathEscape(addr), q, &out)
	return out, err
}

// ImportSuppressions sends a CSV file, taken whole or not at all: a file
// with bad lines is an *APIError that lists them.
func (c *Client) ImportSuppressions(ctx context.Context, csv io.Reader) (ImportResult, error) {
	var out ImportResult
	err := c.send(ctx, http.MethodPost, "/v1/suppressions/import", nil, csv, "text/csv", &out)
	return out, err
}

// ExportSuppressions writes the active entries f selects (its After and
// Limit aside) to w as CSV, as the relay streams them.
func (c *Client) ExportSuppressions(ctx context.Context, w io.Writer, f SuppressionFilter) error {
	f.After, f.Limit = "", 0
	resp, err := c.request(ctx, http.MethodGet, "/v1/suppressions/export", f.values(), nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("the export was cut short (%w): export again", err)
	}
	return nil
}

// IsNotFound reports whether err is the API's 404.
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.StatusCode == http.StatusNotFound
}
