package api

import (
	"encoding/base64"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// NextTokenHeader carries the token of the next page of a list; absent on
// the last page. Pass it back as ?next_token= (Nomad's scheme).
const NextTokenHeader = "X-Volhost-NextToken"

// pageList is one paginated list: the name its tokens carry and the form
// of its sort keys. A token is base64url(name ":" key), so a list refuses
// a token it did not hand out, another list's included, with one check
// (pageParams) instead of one per route: /v1/events alone used to check
// its tokens, and the other lists started a page at whatever base64 said.
type pageList struct {
	name  string
	valid func(key string) bool
}

// The paginated lists. Keys are each table's memdb ID index order.
var (
	volumesList = pageList{"volumes", func(k string) bool { ns, id, ok := strings.Cut(k, "\x00"); return ok && isID(ns) && isID(id) }}
	nodesList   = pageList{"nodes", isID}
	pluginsList = pageList{"plugins", isID}
	allocsList  = pageList{"allocs", isID}
	// A leftover's ID is namespace/volume/alloc (IDs may hold "/" too).
	leftoversList = pageList{"leftovers", func(k string) bool { return strings.Count(k, "/") >= 2 && utf8.ValidString(k) }}
	// An event token is the hex sequence number of the next page's first event.
	eventsList = pageList{"events", func(k string) bool { n, err := strconv.ParseUint(k, 16, 64); return err == nil && n > 0 }}
	// A module's served volumes are a count and the first per_page of
	// them: it takes per_page, and no token is valid.
	moduleVolumesList = pageList{"module-volumes", func(string) bool { return false }}
)

func isID(s string) bool { return ValidateID("", s) == nil }

// token is the next_token of the page starting at key.
func (l pageList) token(key string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(l.name + ":" + key))
}

// pageParams are ?per_page= and ?next_token= of one list.
type pageParams struct {
	list    pageList
	perPage int
	start   string // the sort key the page starts at ("" from the first)
}

// pageParams reads the paging parameters of list. per_page defaults to,
// and is capped at, MaxPerPage: one list answer is bounded whatever the
// state holds (64 concurrent lists of 11k volumes once took 2.8 GB).
func (s *Server) pageParams(r *http.Request, list pageList) (pageParams, error) {
	p := pageParams{list: list, perPage: s.cfg.MaxPerPage}
	q := r.URL.Query()
	if v := q.Get("per_page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return p, badRequest("per_page", "must be a positive integer, got %q", v)
		}
		p.perPage = min(n, s.cfg.MaxPerPage)
	}
	if v := q.Get("next_token"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		key, ok := strings.CutPrefix(string(b), list.name+":")
		if err != nil || !ok || !list.valid(key) {
			return p, badRequest("next_token", "%q is not a token this list handed out (pass back the %s header of the previous page of %s)",
				v, NextTokenHeader, r.URL.Path)
		}
		p.start = key
	}
	return p, nil
}

// setNext sets the next-token header to the page starting at key, or
// clears it ("" : this was the last page).
func (p pageParams) setNext(w http.ResponseWriter, key string) {
	if key == "" {
		w.Header().Del(NextTokenHeader)
		return
	}
	w.Header().Set(NextTokenHeader, p.list.token(key))
}

// paginate cuts the page p asks for out of items, which are sorted by key
// (memdb's primary key order), and sets or clears the next-token header.
// A token whose item has gone since starts at the next one, so a page
// walk never repeats or skips a surviving item.
func paginate[T any](w http.ResponseWriter, items []T, key func(T) string, p pageParams) []T {
	start := 0
	if p.start != "" {
		start = sort.Search(len(items), func(i int) bool { return key(items[i]) >= p.start })
	}
	end := min(len(items), start+p.perPage)
	next := ""
	if end < len(items) {
		next = key(items[end])
	}
	p.setNext(w, next)
	return items[start:end]
}

// Sort keys, matching the order of each table's memdb ID index.
func volumeKey(ns, id string) string { return ns + "\x00" + id }
