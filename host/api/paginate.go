package api

import (
	"encoding/base64"
	"net/http"
	"sort"
	"strconv"
)

// NextTokenHeader carries the token of the next page of a list; absent on
// the last page. Pass it back as ?next_token= (Nomad's scheme).
const NextTokenHeader = "X-Volhost-NextToken"

// pageParams are ?per_page= and ?next_token=. A token is the opaque
// (base64url) sort key of the first item of the page.
type pageParams struct {
	perPage int
	start   string
}

// pageParams reads the paging parameters. per_page defaults to, and is
// capped at, MaxPerPage: one list answer is bounded whatever the state
// holds (64 concurrent lists of 11k volumes once took 2.8 GB).
func (s *Server) pageParams(r *http.Request) (pageParams, error) {
	p := pageParams{perPage: s.cfg.MaxPerPage}
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
		if err != nil {
			return p, badRequest("next_token", "is not a token this API handed out: %q", v)
		}
		p.start = string(b)
	}
	return p, nil
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
	if end < len(items) {
		w.Header().Set(NextTokenHeader, base64.RawURLEncoding.EncodeToString([]byte(key(items[end]))))
	} else {
		w.Header().Del(NextTokenHeader)
	}
	return items[start:end]
}

// Sort keys, matching the order of each table's memdb ID index.
func volumeKey(ns, id string) string { return ns + "\x00" + id }
