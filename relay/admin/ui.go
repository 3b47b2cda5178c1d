package admin

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// The dashboard: plain HTML, CSS and JavaScript, built into the binary so
// that it works with no network and no build step. It talks only to the
// API beside it.
//
//go:embed ui
var uiFiles embed.FS

// uiPolicy allows nothing but the relay's own files: no inline script or
// style, no other origin, no frames. Images may be data: and blob: URLs
// (the empty favicon), and the receipts are downloaded through blob: URLs.
const uiPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

type uiFile struct {
	body []byte
	typ  string
	etag string
}

// dashboard serves GET / as the page and GET /ui/<file> as its files.
func dashboard() http.Handler {
	files := map[string]uiFile{}
	err := fs.WalkDir(uiFiles, "ui", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := uiFiles.ReadFile(p)
		if err != nil {
			return err
		}
		typ := mime.TypeByExtension(path.Ext(p))
		if typ == "" {
			typ = "application/octet-stream"
		}
		sum := sha256.Sum256(b)
		files[strings.TrimPrefix(p, "ui/")] = uiFile{body: b, typ: typ, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("admin: the embedded dashboard cannot be read: " + err.Error()) // a broken build
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := "index.html"
		if r.URL.Path != "/" {
			name = strings.TrimPrefix(r.URL.Path, "/ui/")
		}
		f, ok := files[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", f.typ)
		// no-cache: the browser asks again every time, and the ETag makes
		// that a 304 while the binary is the same.
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", f.etag)
		h.Set("Content-Security-Policy", uiPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
	})
}
