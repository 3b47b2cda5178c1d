package admin

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/genropy/postino/relay/delivery"
)

// Sites are MX delivery's sites as the relay sees them, and their
// suspension by operators (delivery.Engine).
type Sites interface {
	Sites() []delivery.SiteView
	SiteByKey(key string) (delivery.SiteView, bool)
	Suspend(ctx context.Context, key, by string, until time.Time) error
	Resume(ctx context.Context, key string) error
}

// SiteList is the sites this relay has seen.
type SiteList struct {
	Sites []delivery.SiteView `json:"sites"`
}

// Suspension is a site's suspension as the API made or ended it.
type Suspension struct {
	Site  string     `json:"site"`
	By    string     `json:"by,omitempty"`
	Until *time.Time `json:"until,omitempty"`
}

// maxSuspension bounds a suspension: one that is forgotten still ends.
const maxSuspension = 30 * 24 * time.Hour

func (a *api) siteRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/destinations", a.sites)
	mux.HandleFunc("GET /v1/destinations/{site}", a.showSite)
	mux.HandleFunc("POST /v1/destinations/{site}/suspend", a.suspendSite)
	mux.HandleFunc("POST /v1/destinations/{site}/resume", a.resumeSite)
}

// siteSource is the relay's sites, or an answer that it has none.
func (a *api) siteSource(w http.ResponseWriter) Sites {
	if a.opts.Sites == nil {
		writeError(w, http.StatusNotImplemented, "this relay does not deliver: it has no sites")
	}
	return a.opts.Sites
}

// sites answers GET /v1/destinations.
func (a *api) sites(w http.ResponseWriter, r *http.Request) {
	if s := a.siteSource(w); s != nil {
		writeJSON(w, http.StatusOK, SiteList{Sites: s.Sites()})
	}
}

// showSite answers GET /v1/destinations/{site}.
func (a *api) showSite(w http.ResponseWriter, r *http.Request) {
	s := a.siteSource(w)
	if s == nil {
		return
	}
	v, ok := s.SiteByKey(r.PathValue("site"))
	if !ok {
		writeError(w, http.StatusNotFound, "no site %q on this relay: it had no mail for it lately; see postino destinations list", r.PathValue("site"))
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// suspendSite answers POST /v1/destinations/{site}/suspend?for=1h: the
// site (a provider's name is its site) takes no mail until then, on every
// relay sharing the outbox. A site no relay has seen yet may be suspended
// too: it is suspended when its mail comes.
func (a *api) suspendSite(w http.ResponseWriter, r *http.Request) {
	s := a.siteSource(w)
	if s == nil {
		return
	}
	d, err := time.ParseDuration(r.URL.Query().Get("for"))
	if err != nil || d <= 0 || d > maxSuspension {
		writeError(w, http.StatusBadRequest, "for %q: give how long the suspension lasts, from 1s to %s (for=2h)", r.URL.Query().Get("for"), maxSuspension)
		return
	}
	key, by, until := r.PathValue("site"), operator(r), time.Now().Add(d).UTC()
	if err := s.Suspend(r.Context(), key, by, until); err != nil {
		a.siteError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, Suspension{Site: key, By: by, Until: &until})
}

// resumeSite answers POST /v1/destinations/{site}/resume.
func (a *api) resumeSite(w http.ResponseWriter, r *http.Request) {
	s := a.siteSource(w)
	if s == nil {
		return
	}
	key := r.PathValue("site")
	if err := s.Resume(r.Context(), key); err != nil {
		a.siteError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, Suspension{Site: key})
}

func (a *api) siteError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, delivery.ErrNoSuspensions) {
		writeError(w, http.StatusNotImplemented, "%v", err)
		return
	}
	a.internalError(w, r, "the suspension could not be stored in the outbox", err)
}

// Sites lists the sites the relay has seen.
func (c *Client) Sites(ctx context.Context) (SiteList, error) {
	var out SiteList
	return out, c.do(ctx, http.MethodGet, "/v1/destinations", nil, &out)
}

// Site is one site, by its key.
func (c *Client) Site(ctx context.Context, key string) (delivery.SiteView, error) {
	var out delivery.SiteView
	return out, c.do(ctx, http.MethodGet, "/v1/destinations/"+url.PathEscape(key), nil, &out)
}

// SuspendSite suspends a site, or a provider's, for d.
func (c *Client) SuspendSite(ctx context.Context, key string, d time.Duration) (Suspension, error) {
	var out Suspension
	return out, c.do(ctx, http.MethodPost, "/v1/destinations/"+url.PathEscape(key)+"/suspend", url.Values{"for": {d.String()}}, &out)
}

// ResumeSite ends a site's suspension.
func (c *Client) ResumeSite(ctx context.Context, key string) error {
	return c.do(ctx, http.MethodPost, "/v1/destinations/"+url.PathEscape(key)+"/resume", nil, nil)
}
