package intake

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	// Display names in any charset a mail client may use (RFC 2047).
	_ "github.com/emersion/go-message/charset"
	"github.com/emersion/go-message/mail"
	"github.com/emersion/go-message/textproto"

	"github.com/genropy/postino/backends"
)

// Header names the relay reads.
const (
	HeaderMailID     = "X-Genro-Mail-ID"
	HeaderPriority   = "X-Postino-Priority"
	HeaderBatch      = "X-Postino-Batch"
	HeaderStream     = "X-Postino-Stream"
	HeaderSendAfter  = backends.HeaderSendAfter
	controlPrefix    = "X-Postino-"
	maxSendAfterSkew = 366 * 24 * time.Hour
)

// controlHeaders are the X-Postino-* fields an app may set. Any other field
// with that prefix is refused, so that a typo is not silently ignored.
func controlHeaders() []string {
	return []string{HeaderPriority, HeaderBatch, HeaderSendAfter, HeaderPECReceipt, HeaderStream}
}

// control is what the app asked for through the control headers.
type control struct {
	priority  int
	batch     string
	sendAfter time.Time
	raw       map[string]string
}

// readControl reads and removes the X-Postino-* fields.
func readControl(h *textproto.Header, now time.Time) (control, error) {
	c := control{priority: backends.PriorityNormal}
	known := controlHeaders()
	if k := unknownControl(h, known); k != "" {
		return c, contentError("unknown control header %s; the relay reads only %s", k, strings.Join(known, ", "))
	}
	for _, name := range known {
		vals := h.Values(name)
		if len(vals) == 0 {
			continue
		}
		if len(vals) > 1 {
			return c, contentError("%s appears %d times; give it once", name, len(vals))
		}
		v := strings.TrimSpace(vals[0])
		if c.raw == nil {
			c.raw = make(map[string]string)
		}
		c.raw[name] = v
		h.Del(name)
		if err := c.set(name, v, now); err != nil {
			return c, err
		}
	}
	return c, nil
}

// unknownControl returns the first field of h with the control prefix
// that is none of known, or "".
func unknownControl(h *textproto.Header, known []string) string {
	for f := h.Fields(); f.Next(); {
		k := f.Key()
		if len(k) < len(controlPrefix) || !strings.EqualFold(k[:len(controlPrefix)], controlPrefix) {
			continue
		}
		if !slices.ContainsFunc(known, func(name string) bool { return strings.EqualFold(k, name) }) {
			return k
		}
	}
	return ""
}

// set reads the value v of the control header name into c. The PEC
// receipt header is read from raw when the message is checked as PEC.
func (c *control) set(name, v string, now time.Time) error {
	switch name {
	case HeaderPriority:
		p, err := parsePriority(v)
		if err != nil {
			return err
		}
		c.priority = p
	case HeaderBatch:
		if err := backends.CheckBatch(v); err != nil {
			return contentError("%s: %v", HeaderBatch, err)
		}
		c.batch = v
	case HeaderStream:
		if err := backends.CheckStream(v); err != nil {
			return contentError("%s: %v", HeaderStream, err)
		}
	case HeaderSendAfter:
		t, err := parseSendAfter(v, now)
		if err != nil {
			return err
		}
		c.sendAfter = t
	}
	return nil
}

func parsePriority(v string) (int, error) {
	names := []string{"immediate", "high", "normal", "low"}
	for i, n := range names {
		if strings.EqualFold(v, n) || v == strconv.Itoa(i) {
			return i, nil
		}
	}
	return 0, contentError("%s %q is not a priority: use 0 (immediate), 1 (high), 2 (normal) or 3 (low)", HeaderPriority, v)
}

// sendAfterFormats says what X-Postino-Send-After takes.
const sendAfterFormats = "give Unix seconds (1795345200) or an RFC 3339 time (2026-11-21T18:00:00+01:00)"

func parseSendAfter(v string, now time.Time) (time.Time, error) {
	t, ok := backends.ParseSendAfter(v)
	if !ok {
		return t, contentError("%s %q is not a time%s: %s", HeaderSendAfter, v, millisecondsHint(v), sendAfterFormats)
	}
	if t.After(now.Add(maxSendAfterSkew)) {
		return t, contentError("%s %q is more than a year ahead%s: %s", HeaderSendAfter, v, millisecondsHint(v), sendAfterFormats)
	}
	return t, nil
}

// millisecondsHint says that v looks like a time in milliseconds, as
// JavaScript's Date.now() and Java's currentTimeMillis() give it: 13 digits
// or more before anything else (1795345200000, 1795345200000.0).
func millisecondsHint(v string) string {
	digits := len(v) - len(strings.TrimLeft(v, "0123456789"))
	if digits < 13 {
		return ""
	}
	return " (it looks like milliseconds: use seconds, the value divided by 1000)"
}

// identity is what the relay makes sure every message carries.
type identity struct {
	id        string // X-Genro-Mail-ID
	messageID string // Message-ID without brackets
}

// readIdentity finds the app's X-Genro-Mail-ID and Message-ID and checks the
// fields a message must have.
func readIdentity(h *textproto.Header) (identity, error) {
	var out identity
	switch vals := h.Values(HeaderMailID); len(vals) {
	case 0:
	case 1:
		out.id = strings.TrimSpace(vals[0])
		if err := backends.CheckID(out.id); err != nil {
			return out, contentError("%s: %v", HeaderMailID, err)
		}
	default:
		return out, contentError("%s appears %d times; give it once", HeaderMailID, len(vals))
	}

	from := h.Values("From")
	if len(from) == 0 {
		return out, contentError("the message has no From header; add one (RFC 5322 requires it)")
	}
	if len(from) > 1 {
		return out, contentError("the From header appears %d times; give it once", len(from))
	}
	mh := mail.Header{}
	mh.Header.Header = *h
	if addrs, err := mh.AddressList("From"); err != nil || len(addrs) == 0 {
		why := "no address"
		if err != nil {
			why = err.Error()
		}
		return out, contentError("the From header %q is not a valid address list (%s)", from[0], why)
	}

	switch vals := h.Values("Message-Id"); len(vals) {
	case 0:
	case 1:
		mid, err := mh.MessageID()
		if err != nil || mid == "" {
			// Keep what the app wrote: it is what receipts will quote.
			mid = strings.Trim(strings.TrimSpace(vals[0]), "<>")
		}
		if mid == "" {
			return out, contentError("the Message-ID header is empty")
		}
		out.messageID = mid
	default:
		return out, contentError("the Message-ID header appears %d times; give it once", len(vals))
	}
	return out, nil
}

// addField puts a field at the top of the header, as trace fields go.
func addField(h *textproto.Header, name, value string) {
	h.AddRaw([]byte(name + ": " + value + "\r\n"))
}

// receivedField is the trace field of RFC 5321 section 4.4.
func receivedField(helo, clientIP, host, with, id string, rcpts []string, t time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "from %s", helo)
	if clientIP != "" {
		fmt.Fprintf(&b, " ([%s])", clientIP)
	}
	fmt.Fprintf(&b, "\r\n\tby %s (Postino) with %s id %s", host, with, id)
	if len(rcpts) == 1 {
		fmt.Fprintf(&b, "\r\n\tfor <%s>", rcpts[0])
	}
	fmt.Fprintf(&b, "; %s", t.Format(time.RFC1123Z))
	return b.String()
}
