package api

import (
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
	f, pp, err := s.eventFilter(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	f.SinceIndex = since
	s.read(w, r, func(ws memdb.WatchSet, rd Reader) (any, uint64, error) {
		// events:read opens the route; each event is then read like its
		// subject (acl.AllowedEvent): a token that cannot read a
		// namespace sees none of its events. The ACL is the token's at
		// this run, not at the request's start: a blocking query woken
		// after its policy was narrowed must not show what the old
		// policy allowed (currentACL).
		a, err := s.currentACL(r)
		if err != nil {
			return nil, 0, err
		}
		if a != nil {
			f.Visible = a.AllowedEvent
		}
		es, next, err := rd.EventsFiltered(ws, f)
		if err != nil {
			return nil, 0, err
		}
		out := make([]*structs.Event, len(es))
		for i, e := range es {
			out[i] = e.Event
		}
		key := ""
		if next != 0 {
			key = strconv.FormatUint(next, 16)
		}
		pp.setNext(w, key)
		idx, err := rd.Index(tableEvents)
		return out, idx, err
	})
}

func (s *Server) eventFilter(r *http.Request) (state.EventFilter, pageParams, error) {
	q := r.URL.Query()
	var f state.EventFilter
	pp, err := s.pageParams(r, eventsList)
	if err != nil {
		return f, pp, err
	}
	f.Limit = pp.perPage
	if pp.start != "" {
		f.FromSeq, _ = strconv.ParseUint(pp.start, 16, 64) // eventsList checked the form
	}
	if v := q.Get("volume_id"); v != "" {
		if err := ValidateID("volume_id", v); err != nil {
			return f, pp, err
		}
		ns, err := namespace(r)
		if err != nil {
			return f, pp, err
		}
		f.Namespace, f.VolumeID = ns, v
	} else if q.Has("namespace") {
		// Events are filtered by volume, not by namespace: alone it would
		// be silently ignored and answer every namespace's events.
		return f, pp, badRequest("namespace", "filters only with volume_id (the namespace of that volume)")
	}
	if v := q.Get("type"); v != "" {
		if !structs.ValidEventType(v) {
			return f, pp, badChoice("type", v, structs.EventTypes...)
		}
		f.Type = v
	}
	for name, dst := range map[string]*time.Time{"after": &f.After, "before": &f.Before} {
		if v := q.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				return f, pp, badRequest(name, "not an RFC 3339 time (e.g. 2026-12-01T10:00:00Z): %q", v)
			}
			*dst = t
		}
	}
	if !f.After.IsZero() && !f.Before.IsZero() && !f.Before.After(f.After) {
		return f, pp, badRequest("before", "must be later than after (%s)", f.After.Format(time.RFC3339))
	}
	return f, pp, nil
}
