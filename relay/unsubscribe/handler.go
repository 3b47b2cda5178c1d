package unsubscribe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"html/template"
	"log/slog"
	"math"
	"mime"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Unsubscriber records an unsubscription. Doing it twice must be
// harmless: a link is followed as often as its owner likes.
type Unsubscriber interface {
	Unsubscribe(ctx context.Context, r Request) error
}

// Request is one unsubscription.
type Request struct {
	Target
	At time.Time
	// Via is "https" (the one-click POST) or "mailto" (an unsubscribe
	// mail).
	Via string
	// Client is the address the request came from, or the mailbox's
	// sender for a mail.
	Client string
}

// Config is what NewHandler needs.
type Config struct {
	Keys         *Keys
	Unsubscriber Unsubscriber
	// Rate is the requests a second each client may make, after Burst at
	// once; a client is an address, or an IPv6 /64. 0 turns the limit
	// off.
	Rate  float64
	Burst int
	// TrustedProxies are the peers whose X-Forwarded-For is believed: the
	// client is its rightmost address not among them.
	TrustedProxies []netip.Prefix
	Logger         *slog.Logger
	Now            func() time.Time
}

// maxBody bounds a POST's body: the one field it needs is 26 bytes, and a
// multipart form a few hundred.
const maxBody = 4 << 10

// NewHandler serves the links: GET /u/{token} shows a page whose button
// POSTs; POST /u/{token} with List-Unsubscribe=One-Click unsubscribes.
func NewHandler(cfg Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	h := &handler{cfg: cfg}
	if cfg.Rate > 0 {
		h.limit = newLimiter(cfg.Rate, cfg.Burst)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /u/{token}", h.confirm)
	mux.HandleFunc("POST /u/{token}", h.unsubscribe)
	h.mux = mux
	return h
}

type handler struct {
	cfg   Config
	limit *limiter
	mux   *http.ServeMux
}

// csp lets the pages use their one inline style and nothing else, and
// their form post only to the page itself.
var csp = "default-src 'none'; style-src 'sha256-" + styleHash() + "'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

func styleHash() string {
	sum := sha256.Sum256([]byte(style))
	return base64.StdEncoding.EncodeToString(sum[:])
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", csp)
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Cache-Control", "no-store")
	if h.limit != nil && !h.oneClick(r) {
		if ok, wait := h.limit.allow(h.clientIP(r), h.cfg.Now()); !ok {
			hd.Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
			h.page(w, http.StatusTooManyRequests, pageTooMany, nil)
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

// oneClick reports whether r is a POST of a token the keys verify. The
// mailbox providers send the one-click POSTs of all their users from few
// addresses, and those must not wait: only what a token could be forged
// with, and the GETs of the page, count against a client's rate. (Forging
// a token takes about 2^128 tries; a valid one unsubscribes once, and
// again changes nothing.)
func (h *handler) oneClick(r *http.Request) bool {
	token, ok := strings.CutPrefix(r.URL.Path, "/u/")
	if r.Method != http.MethodPost || !ok || len(token) > MaxTokenLen {
		return false
	}
	_, err := h.cfg.Keys.Verify(token, h.cfg.Now())
	return err == nil
}

// confirm shows the page of a link: a GET never unsubscribes, since mail
// scanners follow links.
func (h *handler) confirm(w http.ResponseWriter, r *http.Request) {
	t, err := h.cfg.Keys.Verify(r.PathValue("token"), h.cfg.Now())
	if err != nil {
		h.page(w, http.StatusBadRequest, pageInvalid, nil)
		return
	}
	h.page(w, http.StatusOK, pageConfirm, mask(t.Recipient))
}

func (h *handler) unsubscribe(w http.ResponseWriter, r *http.Request) {
	now := h.cfg.Now()
	t, err := h.cfg.Keys.Verify(r.PathValue("token"), now)
	if err != nil {
		h.page(w, http.StatusBadRequest, pageInvalid, nil)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	if err := parseForm(r); err != nil {
		if _, tooBig := errors.AsType[*http.MaxBytesError](err); tooBig {
			h.page(w, http.StatusRequestEntityTooLarge, pageNoOneClick, nil)
			return
		}
		h.page(w, http.StatusBadRequest, pageNoOneClick, nil)
		return
	}
	if r.PostForm.Get("List-Unsubscribe") != "One-Click" {
		h.page(w, http.StatusBadRequest, pageNoOneClick, nil)
		return
	}
	req := Request{Target: t, At: now, Via: "https", Client: h.clientIP(r).String()}
	if err := h.cfg.Unsubscriber.Unsubscribe(r.Context(), req); err != nil {
		h.cfg.Logger.Error("unsubscribe failed: the client was answered 503 and may try again",
			"stream", t.Stream, "recipient", t.Recipient, "message_id", t.MessageID, "client", req.Client, "error", err)
		w.Header().Set("Retry-After", "60")
		h.page(w, http.StatusServiceUnavailable, pageUnavailable, nil)
		return
	}
	h.cfg.Logger.Info("unsubscribed", "stream", t.Stream, "recipient", t.Recipient, "message_id", t.MessageID, "via", req.Via, "client", req.Client)
	h.page(w, http.StatusOK, pageDone, nil)
}

// parseForm reads the form of an RFC 8058 POST, urlencoded or multipart;
// a body of another type leaves the form empty.
func parseForm(r *http.Request) error {
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "multipart/form-data" {
		err := r.ParseMultipartForm(maxBody)
		if r.MultipartForm != nil {
			r.MultipartForm.RemoveAll()
		}
		return err
	}
	return r.ParseForm()
}

// clientIP is the peer's address, or, from a trusted proxy, the rightmost
// address of X-Forwarded-For that is not a trusted proxy's: the ones left
// of it are whatever the client wrote.
func (h *handler) clientIP(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	ip := ap.Addr().Unmap()
	if !h.trusted(ip) {
		return ip
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
		if err != nil {
			// A trusted proxy writes addresses: this one came from
			// beyond the last trusted hop, which is the client then.
			return ip
		}
		ip = hop.Unmap()
		if !h.trusted(ip) {
			return ip
		}
	}
	return ip
}

func (h *handler) trusted(ip netip.Addr) bool {
	for _, p := range h.cfg.TrustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// mask shows enough of an address for its owner to recognise it, and
// not the address: j***@example.com.
func mask(addr string) string {
	local, domain, ok := strings.Cut(addr, "@")
	if !ok || local == "" {
		return "***"
	}
	r := []rune(local)
	return string(r[0]) + "***@" + domain
}

// page writes one of the pages, whole, so that two responses of the same
// page are the same bytes.
func (h *handler) page(w http.ResponseWriter, status int, name string, data any) {
	var b bytes.Buffer
	if err := pages.ExecuteTemplate(&b, name, data); err != nil {
		h.cfg.Logger.Error("unsubscribe page failed", "page", name, "error", err)
		status = http.StatusInternalServerError
		b.Reset()
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(b.Len()))
	w.WriteHeader(status)
	w.Write(b.Bytes())
}

const (
	pageConfirm     = "confirm"
	pageDone        = "done"
	pageInvalid     = "invalid"
	pageNoOneClick  = "noOneClick"
	pageTooMany     = "tooMany"
	pageUnavailable = "unavailable"
)

// style is the pages' one style sheet; the Content-Security-Policy
// allows it by its hash.
const style = `body{font-family:system-ui,sans-serif;max-width:32em;margin:4em auto;padding:0 1em;line-height:1.5}button{font-size:1em;padding:.5em 1.5em}`

var pages = template.Must(template.New("").Parse(`
{{define "head"}}<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width"><meta name="robots" content="noindex">
<title>Unsubscribe</title><style>` + style + `</style></head><body>
{{end}}
{{define "confirm"}}{{template "head"}}<h1>Unsubscribe</h1>
<p>Stop these messages to {{.}}?</p>
<form method="post"><input type="hidden" name="List-Unsubscribe" value="One-Click"><button type="submit">Unsubscribe</button></form>
</body></html>
{{end}}
{{define "done"}}{{template "head"}}<h1>You are unsubscribed</h1>
<p>You will receive no more of these messages.</p>
</body></html>
{{end}}
{{define "invalid"}}{{template "head"}}<h1>Link not valid</h1>
<p>This unsubscribe link is not valid or has expired. Use the link of a more recent message.</p>
</body></html>
{{end}}
{{define "noOneClick"}}{{template "head"}}<h1>Bad request</h1>
<p>An unsubscribe request is a POST whose form holds List-Unsubscribe=One-Click. Use the button of the link's page.</p>
</body></html>
{{end}}
{{define "tooMany"}}{{template "head"}}<h1>Too many requests</h1>
<p>Try again in a little while.</p>
</body></html>
{{end}}
{{define "unavailable"}}{{template "head"}}<h1>Try again later</h1>
<p>Your request could not be recorded just now. Try again in a few minutes.</p>
</body></html>
{{end}}
`))
