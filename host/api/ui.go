package api

import (
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/host/ui"
)

// Routes the web UI (host/ui) needs beyond the CLI's:
//
//	GET /ui/...                          the embedded UI (open: the data comes from authorized API calls)
//	GET /v1/acl/token/self/capabilities  ?namespace=  what the caller's token may do, so the UI hides what it may not
//	GET /v1/stats                        ?namespace=  counts and chart series (releases per minute, release latency, stuck over time: the whole store's only)

// uiRoutes mounts the UI and its read routes; every Server has them,
// with ACL on or off.
func (s *Server) uiRoutes() {
	s.mux.Handle("GET "+ui.Prefix, ui.MustNew())
	s.mux.HandleFunc("GET /v1/acl/token/self/capabilities", s.selfCapabilities)
	s.mux.HandleFunc("GET /v1/stats", s.stats)
}

// namespacedCaps and globalCaps are the capabilities the capability
// answer reports.
var (
	namespacedCaps = []acl.Capability{acl.NamespaceRead, acl.NamespaceRegister, acl.NamespaceClaim,
		acl.NamespaceDetach, acl.NamespaceDeregister, acl.NamespaceForceDeregister}
	globalCaps = []acl.Capability{acl.NodeRead, acl.NodeWrite, acl.OperatorRead, acl.OperatorWrite,
		acl.ModulesRead, acl.ModulesReload, acl.EventsRead}
)

// CapabilitiesResponse answers GET /v1/acl/token/self/capabilities. With
// ACL off every capability is granted (ACLEnabled false says why).
type CapabilitiesResponse struct {
	ACLEnabled bool   `json:"acl_enabled"`
	Accessor   string `json:"accessor"`
	Name       string `json:"name,omitempty"`
	Management bool   `json:"management"`
	// Global are the granted capabilities that are not per namespace.
	Global []acl.Capability `json:"global"`
	// Namespace is the namespace asked about (?namespace=, "default") and
	// InNamespace what the token may do in it.
	Namespace   string           `json:"namespace"`
	InNamespace []acl.Capability `json:"in_namespace"`
	// Everywhere are the namespaced capabilities granted in every
	// namespace (what a cross-namespace list needs).
	Everywhere []acl.Capability `json:"everywhere"`
}

func (s *Server) selfCapabilities(w http.ResponseWriter, r *http.Request) {
	ns, err := namespace(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	out := CapabilitiesResponse{Namespace: ns, Global: []acl.Capability{}, InNamespace: []acl.Capability{}, Everywhere: []acl.Capability{}}
	if s.auth.cfg == nil {
		out.Accessor, out.Management = "anonymous", true
		out.Global = slices.Clone(globalCaps)
		out.InNamespace = slices.Clone(namespacedCaps)
		out.Everywhere = slices.Clone(namespacedCaps)
		WriteJSON(w, http.StatusOK, out)
		return
	}
	out.ACLEnabled = true
	id := identityOf(r)
	out.Accessor = id.Accessor()
	if id != nil && id.Token != nil {
		out.Name = id.Token.Name
	}
	a := acl.DenyAll()
	if id != nil && id.ACL != nil {
		a = id.ACL
	}
	out.Management = a.IsManagement()
	for _, c := range globalCaps {
		if a.Allowed(c, "") {
			out.Global = append(out.Global, c)
		}
	}
	for _, c := range namespacedCaps {
		if a.Allowed(c, ns) {
			out.InNamespace = append(out.InNamespace, c)
		}
		if a.AllowedEverywhere(c) {
			out.Everywhere = append(out.Everywhere, c)
		}
	}
	WriteJSON(w, http.StatusOK, out)
}

// Stats windows and buckets.
const (
	statsWindow      = 30 * time.Minute
	statsStuckListed = 25
	// StuckSampleEvery is how often the server samples the stuck count
	// for the stuck-over-time chart; stuckSamples of them are kept (1h).
	StuckSampleEvery = 10 * time.Second
	stuckSamples     = 360
)

// latencyBounds are the upper bounds (exclusive) of the release latency
// histogram buckets; the last bucket is everything above.
var latencyBounds = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, time.Second,
	5 * time.Second, 15 * time.Second, time.Minute, 5 * time.Minute}

// StatsResponse answers GET /v1/stats: what the UI's overview and charts
// show, computed from this agent's state and events in one read.
type StatsResponse struct {
	Volumes       int                        `json:"volumes"`
	Claims        int                        `json:"claims"`
	ClaimsByState map[structs.ClaimState]int `json:"claims_by_state"`
	ClaimsByNode  map[string]int             `json:"claims_by_node"`
	StuckCount    int                        `json:"stuck_count"`
	Stuck         []StuckVolume              `json:"stuck"` // the longest-stuck first, at most statsStuckListed
	Releases      []MinuteCount              `json:"releases_per_minute"`
	Latency       []LatencyBucket            `json:"release_latency"`
	LatencyBasis  string                     `json:"release_latency_basis"`
	StuckSeries   []StuckSample              `json:"stuck_over_time"` // the whole store's: empty in a namespace's answer
	WindowStart   time.Time                  `json:"window_start"`
	Now           time.Time                  `json:"now"`
	Plugins       map[string]int             `json:"volumes_by_plugin"`
	Namespaces    map[string]int             `json:"volumes_by_namespace"`
}

// StuckVolume is a stuck volume in the overview.
type StuckVolume struct {
	Namespace string         `json:"namespace"`
	ID        string         `json:"id"`
	PluginID  string         `json:"plugin_id"`
	Stuck     *structs.Stuck `json:"stuck"`
}

// MinuteCount is one minute of the releases chart.
type MinuteCount struct {
	Minute time.Time `json:"minute"`
	Count  int       `json:"count"`
}

// LatencyBucket counts releases whose latency was below LessThan (0: the
// open-ended last bucket).
type LatencyBucket struct {
	LessThanSeconds float64 `json:"lt_seconds"`
	Label           string  `json:"label"`
	Count           int     `json:"count"`
}

// StuckSample is one sample of the stuck volume count.
type StuckSample struct {
	Time  time.Time `json:"time"`
	Count int       `json:"count"`
}

// stuckSampler keeps the last stuckSamples samples of the stuck count.
type stuckSampler struct {
	mu      sync.Mutex
	samples []StuckSample
}

func (s *stuckSampler) add(t time.Time, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, StuckSample{Time: t, Count: n})
	if len(s.samples) > stuckSamples {
		s.samples = slices.Clone(s.samples[len(s.samples)-stuckSamples:])
	}
}

func (s *stuckSampler) list() []StuckSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// sampleStuck records the stuck count now; runStuckSampler calls it
// every StuckSampleEvery while the server serves.
func (s *Server) sampleStuck(now time.Time) {
	var n int
	_, err := s.store.Query(s.base, 0, 0, func(ws memdb.WatchSet, rd Reader) (uint64, error) {
		st, err := rd.VolumeStatsWatch(nil) // a count kept in step, not a scan (BenchmarkScale)
		n = st.Stuck
		return 0, err
	})
	if err != nil {
		s.log.Debug("stuck sample skipped", "error", err)
		return
	}
	s.stuckSamples.add(now, n)
}

// runStuckSampler samples until the server shuts down (s.base ends).
func (s *Server) runStuckSampler() {
	s.sampleStuck(time.Now())
	t := time.NewTicker(StuckSampleEvery)
	defer t.Stop()
	for {
		select {
		case <-s.base.Done():
			return
		case now := <-t.C:
			s.sampleStuck(now)
		}
	}
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("namespace")
	if ns != "" {
		if err := ValidateID("namespace", ns); err != nil {
			WriteError(w, err)
			return
		}
	}
	s.read(w, r, func(ws memdb.WatchSet, rd Reader) (any, uint64, error) {
		now := time.Now()
		out, err := computeStats(ws, rd, ns, now, &s.releases)
		if err != nil {
			return nil, 0, err
		}
		if ns == "" {
			// The samples count every namespace's stuck volumes: a
			// namespace's answer (what a token scoped to it reads)
			// carries none of them.
			out.StuckSeries = s.stuckSamples.list()
		}
		if out.StuckSeries == nil {
			out.StuckSeries = []StuckSample{}
		}
		idx, err := maxIndex(rd, tableVolumes, tableEvents)
		return out, idx, err
	})
}

// countVolumes fills in out's volume and claim counts and its stuck
// volumes (unsorted, uncut). For the whole store (ns "") it reads what the
// store keeps in step with every write: the stats row, the stuck volumes'
// index and the claims table, O(stuck volumes + claims). It used to scan
// every volume (BenchmarkScale times that scan at 1,000,000 volumes), on
// every load of the UI's overview and nodes pages and again on every write
// that woke their blocking query. One namespace is read from that
// namespace's key prefix of the volumes table: O(its volumes).
func countVolumes(ws memdb.WatchSet, rd Reader, ns string, out *StatsResponse) error {
	if ns != "" {
		return countNamespace(ws, rd, ns, out)
	}
	st, err := rd.VolumeStatsWatch(ws)
	if err != nil {
		return err
	}
	out.Volumes, out.StuckCount = st.Volumes, st.Stuck
	for cs, n := range st.Claims {
		out.Claims += n
		out.ClaimsByState[cs] = n
	}
	out.Plugins, out.Namespaces = st.ByPlugin, st.ByNamespace
	if out.ClaimsByNode, err = rd.ClaimCountsByNode(ws); err != nil {
		return err
	}
	stuck, err := rd.StuckVolumes(ws)
	if err != nil {
		return err
	}
	for _, v := range stuck {
		out.Stuck = append(out.Stuck, stuckVolume(v))
	}
	return nil
}

// countNamespace is countVolumes for one namespace: a walk of its volumes.
func countNamespace(ws memdb.WatchSet, rd Reader, ns string, out *StatsResponse) error {
	next, err := rd.VolumesFrom(ws, ns, "")
	if err != nil {
		return err
	}
	for v := next(); v != nil && v.Namespace == ns; v = next() {
		out.Volumes++
		out.Plugins[v.PluginID]++
		out.Namespaces[v.Namespace]++
		for _, c := range v.Claims {
			out.Claims++
			out.ClaimsByState[c.State]++
			out.ClaimsByNode[c.NodeID]++
		}
		if v.Stuck != nil {
			out.StuckCount++
			out.Stuck = append(out.Stuck, stuckVolume(v))
		}
	}
	return nil
}

func stuckVolume(v *structs.Volume) StuckVolume {
	return StuckVolume{Namespace: v.Namespace, ID: v.ID, PluginID: v.PluginID, Stuck: v.Stuck}
}

// computeStats reads the counts, the stuck volumes and the release series
// of the last statsWindow from one snapshot.
//
// Release latency is measured per freed claim from the moment its
// allocation was last updated to a terminal status (the alloc record's
// modify time: when the release became allowed) to the event that removed
// the claim. A claim whose allocation record is gone or not terminal is
// measured from its first release event instead, which leaves out the
// first step; LatencyBasis says how many of each there were.
func computeStats(ws memdb.WatchSet, rd Reader, ns string, now time.Time, releases *releaseWindow) (*StatsResponse, error) {
	out := &StatsResponse{
		ClaimsByState: map[structs.ClaimState]int{},
		ClaimsByNode:  map[string]int{},
		Plugins:       map[string]int{},
		Namespaces:    map[string]int{},
		Stuck:         []StuckVolume{},
		Now:           now,
	}
	if err := countVolumes(ws, rd, ns, out); err != nil {
		return nil, err
	}
	sort.SliceStable(out.Stuck, func(i, j int) bool { return out.Stuck[i].Stuck.Since.Before(out.Stuck[j].Stuck.Since) })
	if len(out.Stuck) > statsStuckListed {
		out.Stuck = out.Stuck[:statsStuckListed]
	}

	start := now.Add(-statsWindow).Truncate(time.Minute)
	out.WindowStart = start
	minutes := int(now.Sub(start)/time.Minute) + 1
	out.Releases = make([]MinuteCount, minutes)
	for i := range out.Releases {
		out.Releases[i].Minute = start.Add(time.Duration(i) * time.Minute)
	}
	out.Latency = make([]LatencyBucket, len(latencyBounds)+1)
	for i, b := range latencyBounds {
		out.Latency[i] = LatencyBucket{LessThanSeconds: b.Seconds(), Label: "< " + b.String()}
	}
	out.Latency[len(latencyBounds)].Label = "≥ " + latencyBounds[len(latencyBounds)-1].String()

	if err := releases.releaseSeries(ws, rd, ns, start, out); err != nil {
		return nil, err
	}
	return out, nil
}
