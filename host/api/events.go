package api

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// listEvents answers GET /v1/events: the retained events, oldest first,
// one page at a time, filtered by
//
//	?index=N                    events after raft index N (and block until there are some)
//	?volume_id=ID&namespace=NS  one volume's events (its own ring: never evicted by other volumes)
//	?type=T                     one type; type=audit reads the audit trail
//	?after=RFC3339&before=RFC3339
//	?per_page=&next_token=      pages, as on every list (X-Volhost-NextToken)
func (s *Server) listEvents(w http.ResponseWriter, r *http.Request) {
	since, _, err := blockingParams(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	f, err := s.eventFilter(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	f.SinceIndex = since
	s.read(w, r, func(ws memdb.WatchSet, rd Reader) (any, uint64, error) {
		es, next, err := rd.EventsFiltered(ws, f)
		if err != nil {
			return nil, 0, err
		}
		out := make([]*structs.Event, len(es))
		for i, e := range es {
			out[i] = e.Event
		}
		if next != 0 {
			w.Header().Set(NextTokenHeader, base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatUint(next, 16))))
		} else {
			w.Header().Del(NextTokenHeader)
		}
		idx, err := rd.Index(tableEvents)
		return out, idx, err
	})
}

func (s *Server) eventFilter(r *http.Request) (state.EventFilter, error) {
	q := r.URL.Query()
	var f state.EventFilter
	pp, err := s.pageParams(r)
	if err != nil {
		return f, err
	}
	f.Limit = pp.perPage
	if pp.start != "" {
		n, err := strconv.ParseUint(pp.start, 16, 64)
		if err != nil {
			return f, badRequest("next_token", "is not a token this API handed out")
		}
		f.FromSeq = n
	}
	if v := q.Get("volume_id"); v != "" {
		if err := ValidateID("volume_id", v); err != nil {
			return f, err
		}
		ns, err := namespace(r)
		if err != nil {
			return f, err
		}
		f.Namespace, f.VolumeID = ns, v
	}
	if v := q.Get("type"); v != "" {
		if err := ValidateID("type", v); err != nil {
			return f, err
		}
		f.Type = v
	}
	for name, dst := range map[string]*time.Time{"after": &f.After, "before": &f.Before} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, badRequest(name, "not an RFC 3339 time (e.g. 2026-12-01T10:00:00Z): %q", v)
			}
			*dst = t
		}
	}
	if !f.After.IsZero() && !f.Before.IsZero() && !f.Before.After(f.After) {
		return f, badRequest("before", "must be later than after (%s)", f.After.Format(time.RFC3339))
	}
	return f, nil
}
