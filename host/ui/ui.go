// Package ui owns the web UI every agent serves at /ui/: hand-written ES
// modules, CSS and one HTML shell, embedded in the binary (nothing is
// fetched at run time). The pages talk only to the public HTTP API
// (/v1/...) with the operator's token in a header, so the UI can do
// nothing the same token could not do with the CLI.
//
// Serving rules: every asset is answered with its content type,
// Cache-Control: no-cache and a strong ETag (the browser revalidates and
// gets 304 while the binary is the same); a path without a file extension
// is a page of the single-page app and gets index.html; an unknown asset,
// or a directory, is 404 (never a listing).
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is where the UI is mounted.
const Prefix = "/ui/"

//go:embed assets
var embedded embed.FS

// contentTypes are the types of the assets the UI ships. An asset of
// another type is refused at start-up (newHandler) rather than served as a
// sniffed guess.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
	".ico":  "image/x-icon",
	".json": "application/json",
}

// contentSecurityPolicy lets the pages load only their own scripts and
// styles and talk only to their own agent: an injected string in an API
// answer (a volume ID, an error message) can never run as script.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

type asset struct {
	data  []byte
	ctype string
	etag  string
}

// Handler serves the embedded UI under Prefix.
type Handler struct {
	files map[string]*asset // by path below Prefix, e.g. "app.js"
	dirs  map[string]bool
}

// New returns the handler of the embedded assets.
func New() (*Handler, error) { return newHandler(embedded, "assets") }

// MustNew is New for package-level wiring: the assets are compiled in,
// so an error is a build mistake.
func MustNew() *Handler {
	h, err := New()
	if err != nil {
		panic(err)
	}
	return h
}

func newHandler(fsys fs.FS, root string) (*Handler, error) {
	h := &Handler{files: map[string]*asset{}, dirs: map[string]bool{}}
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
		if d.IsDir() {
			h.dirs[rel] = true
			return nil
		}
		ctype, ok := contentTypes[path.Ext(p)]
		if !ok {
			return &fs.PathError{Op: "ui: no content type for", Path: p, Err: fs.ErrInvalid}
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		h.files[rel] = &asset{data: data, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:12]) + `"`}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if h.files["index.html"] == nil {
		return nil, &fs.PathError{Op: "ui: open", Path: root + "/index.html", Err: fs.ErrNotExist}
	}
	return h, nil
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rel, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	a := h.lookup(rel)
	if a == nil {
		http.Error(w, "404 no such UI asset: "+r.URL.Path, http.StatusNotFound)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", a.ctype)
	// no-cache: revalidate every time (the ETag makes that a 304), so a
	// new binary's UI shows at the next load, never a stale mix.
	hd.Set("Cache-Control", "no-cache")
	hd.Set("ETag", a.etag)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Content-Security-Policy", contentSecurityPolicy)
	// ServeContent answers If-None-Match with 304 and HEAD without a body.
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.data))
}

// lookup finds the asset for a path below Prefix: the file itself, or
// index.html for a page of the app (no extension, not a directory).
func (h *Handler) lookup(rel string) *asset {
	if rel == "" {
		return h.files["index.html"]
	}
	if a := h.files[rel]; a != nil {
		return a
	}
	if h.dirs[strings.TrimSuffix(rel, "/")] || strings.Contains(rel, "..") {
		return nil // a directory: no listing
	}
	if path.Ext(rel) != "" {
		return nil // an asset that does not exist
	}
	// Pages of the app: /ui/volumes, /ui/volume?namespace=..&id=.., ...
	if first, _, _ := strings.Cut(rel, "/"); h.dirs[first] {
		return nil // below an asset directory: not a page
	}
	return h.files["index.html"]
}
