package api

import (
	"fmt"
	"sort"
	"sync"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// The release series of GET /v1/stats (releases per minute, release
// latency) come from the claim events of the last statsWindow. Scanning
// that window on every request cost O(events): after 10,000 releases at
// 100,000 volumes the window holds tens of thousands of transitions and
// the scan was most of the answer's 47 ms; a million-volume cluster
// releasing 100,000 claims polled by an open UI (a blocking query that
// returns at every write) spent its CPU rescanning them while followers'
// heartbeats waited. So the agent folds each event into per-minute counts
// once, as it first sees it (events are numbered in append order: the next
// request reads only those after the last one folded), and a request sums
// at most statsWindow minutes.

// claimKey names one claim across its release events.
type claimKey struct{ ns, vol, alloc string }

// minuteReleases is what one minute's ready-to-free events add up to.
type minuteReleases struct {
	count                            int
	latency                          [8]int // by latencyBounds, the last one ≥ the largest
	fromAlloc, fromEvent, unmeasured int
}

// releaseWindow accumulates the release series for the agent's requests.
// The zero value is empty; it is safe for concurrent use.
type releaseWindow struct {
	mu sync.Mutex
	st windowTotals
}

// windowTotals are the folded events.
type windowTotals struct {
	// nextSeq is the first event sequence number not folded yet.
	nextSeq uint64
	// gen is the database folded (state.Snapshot.Generation): a restore
	// replaces it and the window is rebuilt from the new one.
	gen <-chan struct{}
	// eventsIndex is the events table's index at the last fold: a view
	// below it is an older one read concurrently, with nothing new.
	eventsIndex uint64
	// firstStep is the first release event of each claim whose release
	// has not finished yet (dropped past the window).
	firstStep map[claimKey]time.Time
	minutes   map[int64]*minuteReleases // by Unix minute
}

// fold adds one event. alloc reads the claim's allocation (its modify
// time starts the latency when it is terminal).
func (w *windowTotals) fold(ev *structs.Event, alloc func(id string) (*structs.Alloc, error)) error {
	if ev.AllocID == "" || (ev.Type != structs.EventClaimTransition && ev.Type != structs.EventClaimFailed && ev.Type != structs.EventClaimHeld) {
		return nil
	}
	if w.firstStep == nil {
		w.firstStep, w.minutes = map[claimKey]time.Time{}, map[int64]*minuteReleases{}
	}
	k := claimKey{ev.Namespace, ev.VolumeID, ev.AllocID}
	if ev.Fields["from"] != "" {
		if _, ok := w.firstStep[k]; !ok {
			w.firstStep[k] = ev.Time
		}
	}
	if ev.Type != structs.EventClaimTransition || ev.Fields["state"] != string(structs.ClaimReadyToFree) {
		return nil
	}
	began, ok := w.firstStep[k]
	delete(w.firstStep, k)
	m := w.minutes[ev.Time.Unix()/60]
	if m == nil {
		m = &minuteReleases{}
		w.minutes[ev.Time.Unix()/60] = m
	}
	m.count++
	a, err := alloc(ev.AllocID)
	if err != nil {
		return err
	}
	switch {
	case a != nil && a.ClientStatus.Terminal() && !a.ModifyTime.IsZero() && !a.ModifyTime.After(ev.Time):
		began = a.ModifyTime
		m.fromAlloc++
	case ok:
		m.fromEvent++
	default:
		m.unmeasured++ // its release began before the window
		return nil
	}
	d := ev.Time.Sub(began)
	m.latency[sort.Search(len(latencyBounds), func(i int) bool { return d < latencyBounds[i] })]++
	return nil
}

// prune drops what is older than start.
func (w *windowTotals) prune(start time.Time) {
	for m := range w.minutes {
		if m < start.Unix()/60 {
			delete(w.minutes, m)
		}
	}
	for k, t := range w.firstStep {
		if t.Before(start) {
			delete(w.firstStep, k)
		}
	}
}

// catchUp folds the events appended since the last call (all of the
// window's on the first call, or after the table was replaced).
func (w *windowTotals) catchUp(ws memdb.WatchSet, rd Reader, start time.Time) error {
	idx, err := maxIndex(rd, tableEvents)
	if err != nil {
		return err
	}
	if gen := rd.Generation(); gen != w.gen {
		select {
		case <-gen:
			return nil // a view of a database already replaced: nothing to fold
		default:
		}
		*w = windowTotals{gen: gen}
	}
	if w.nextSeq > 0 && idx <= w.eventsIndex {
		w.prune(start)
		return nil // an older (or the same) view: folded already
	}
	f := state.EventFilter{FromSeq: w.nextSeq}
	if w.nextSeq == 0 {
		f = state.EventFilter{After: start}
	}
	es, _, err := rd.EventsFiltered(ws, f)
	if err != nil {
		return err
	}
	alloc := func(id string) (*structs.Alloc, error) { return rd.AllocByID(ws, id) }
	for _, e := range es {
		if err := w.fold(e.Event, alloc); err != nil {
			return err
		}
		w.nextSeq = max(w.nextSeq, e.Seq+1)
	}
	if w.nextSeq == 0 {
		// Nothing in the window yet: later events start after the
		// newest row, whatever its time.
		w.nextSeq = 1
	}
	w.eventsIndex = idx
	w.prune(start)
	return nil
}

// render writes the window from start to now into out.
func (w *windowTotals) render(out *StatsResponse, start time.Time) {
	var fromAlloc, fromEvent, unmeasured int
	for minute, m := range w.minutes {
		if i := int(minute - start.Unix()/60); i >= 0 && i < len(out.Releases) {
			out.Releases[i].Count += m.count
		}
		for i, n := range m.latency {
			out.Latency[i].Count += n
		}
		fromAlloc, fromEvent, unmeasured = fromAlloc+m.fromAlloc, fromEvent+m.fromEvent, unmeasured+m.unmeasured
	}
	out.LatencyBasis = "allocation terminal → claim removed"
	if fromEvent > 0 {
		out.LatencyBasis += fmt.Sprintf("; %d of %d from the first release event (allocation record gone)", fromEvent, fromAlloc+fromEvent)
	}
	if unmeasured > 0 {
		out.LatencyBasis += fmt.Sprintf("; %d not measured (began before the window)", unmeasured)
	}
}

// releaseSeries fills out's release series from start. The whole cluster's
// (ns "") comes from the agent's running window; one namespace's from a
// scan of its events in the window, folded by the same rules.
func (w *releaseWindow) releaseSeries(ws memdb.WatchSet, rd Reader, ns string, start time.Time, out *StatsResponse) error {
	if ns == "" {
		w.mu.Lock()
		defer w.mu.Unlock()
		if err := w.st.catchUp(ws, rd, start); err != nil {
			w.st = windowTotals{} // a fold cut short: start over next time
			return err
		}
		w.st.render(out, start)
		return nil
	}
	es, _, err := rd.EventsFiltered(ws, state.EventFilter{After: start})
	if err != nil {
		return err
	}
	var one windowTotals
	alloc := func(id string) (*structs.Alloc, error) { return rd.AllocByID(ws, id) }
	for _, e := range es {
		if e.Event.Namespace != ns {
			continue
		}
		if err := one.fold(e.Event, alloc); err != nil {
			return err
		}
	}
	one.render(out, start)
	return nil
}
