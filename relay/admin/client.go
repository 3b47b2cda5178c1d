package admin

import (
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
	HTTP  *http.Client
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
	req, err := http.NewRequestWithContext(ctx, method, c.url(path, q), nil)
	if err != nil {
		return err
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the relay's admin API at %s (is postino serve running? see --admin): %w", c.Base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read answer of %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var e Error
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return &APIError{StatusCode: resp.StatusCode, Message: e.Error}
		}
		return &APIError{StatusCode: resp.StatusCode, Message: fmt.Sprintf("%s %s: %s", method, path, resp.Status)}
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*[]byte); ok {
		*raw = body
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
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

// IsNotFound reports whether err is the API's 404.
func IsNotFound(err error) bool {
	var e *APIError
	return errors.As(err, &e) && e.StatusCode == http.StatusNotFound
}
