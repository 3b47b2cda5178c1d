// Command postino-webhook is a status-callback plugin that POSTs each event
// as JSON to a URL, signed, and takes a 2xx answer as the acknowledgement.
//
// It reads its settings from the environment it inherits from the relay:
//
//	POSTINO_WEBHOOK_URL          where to POST (required)
//	POSTINO_WEBHOOK_SECRET_FILE  file holding the signing secret, or
//	POSTINO_WEBHOOK_SECRET       the secret itself (one of the two is required)
//	POSTINO_WEBHOOK_TIMEOUT      per request (default 10s)
//	POSTINO_WEBHOOK_OUTCOMES     comma-separated outcomes to send (default all)
//
// Each request carries X-Postino-Timestamp (Unix seconds) and
// X-Postino-Signature: "v1=" and the hex HMAC-SHA256, keyed by the secret,
// of the timestamp, a dot, and the body. A receiver recomputes it, compares
// in constant time, and rejects a timestamp too old: a replayed request
// fails. X-Postino-Event-Id repeats the event id, to drop duplicates.
package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/genropy/postino/plugins/sdk"
)

type webhook struct {
	url      string
	secret   []byte
	outcomes []string
	client   *http.Client
}

func (w *webhook) Outcomes() []string { return w.outcomes }

// Sign is the signature of a body sent at a time, as receivers check it.
func Sign(secret []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(timestamp))
	mac.Write([]byte("."))
	mac.Write(body)
	return "v1=" + hex.EncodeToString(mac.Sum(nil))
}

func (w *webhook) Deliver(ctx context.Context, e *sdk.Event) error {
	body, err := json.Marshal(e)
	if err != nil {
		return err
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "postino-webhook")
	req.Header.Set("X-Postino-Event-Id", e.EventID)
	req.Header.Set("X-Postino-Timestamp", ts)
	req.Header.Set("X-Postino-Signature", Sign(w.secret, ts, body))
	resp, err := w.client.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", w.url, err)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s answered %s: %s", w.url, resp.Status, strings.TrimSpace(string(snippet)))
	}
	return nil
}

func configure() (*webhook, error) {
	w := &webhook{url: os.Getenv("POSTINO_WEBHOOK_URL")}
	if w.url == "" {
		return nil, fmt.Errorf("POSTINO_WEBHOOK_URL is not set: give the URL to POST events to")
	}
	switch file, env := os.Getenv("POSTINO_WEBHOOK_SECRET_FILE"), os.Getenv("POSTINO_WEBHOOK_SECRET"); {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("POSTINO_WEBHOOK_SECRET_FILE: %w", err)
		}
		w.secret = bytes.TrimRight(b, "\r\n")
	case env != "":
		w.secret = []byte(env)
	}
	// An unsigned event could be forged by anyone who reaches the receiver.
	if len(w.secret) == 0 {
		return nil, fmt.Errorf("no signing secret: set POSTINO_WEBHOOK_SECRET_FILE (a file holding it) or POSTINO_WEBHOOK_SECRET; the receiver checks each request with it")
	}
	timeout := 10 * time.Second
	if t := os.Getenv("POSTINO_WEBHOOK_TIMEOUT"); t != "" {
		d, err := time.ParseDuration(t)
		if err != nil {
			return nil, fmt.Errorf("POSTINO_WEBHOOK_TIMEOUT %q: %w", t, err)
		}
		timeout = d
	}
	w.client = &http.Client{Timeout: timeout, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, o := range strings.Split(os.Getenv("POSTINO_WEBHOOK_OUTCOMES"), ",") {
		if o = strings.TrimSpace(o); o != "" {
			w.outcomes = append(w.outcomes, strings.ToUpper(o))
		}
	}
	return w, nil
}

func main() {
	w, err := configure()
	if err != nil {
		fmt.Fprintln(os.Stderr, "postino-webhook:", err)
		os.Exit(1)
	}
	sdk.Serve(w)
}
