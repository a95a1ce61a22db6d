package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
)

// Response bodies of the write routes.
type (
	// IndexResponse answers a write with the index it was committed at.
	IndexResponse struct {
		Index uint64 `json:"index"`
	}
	// DeregisterResponse answers DELETE /v1/volume/ID: what a forced
	// deregister may have left attached (hashicorp/nomad#8641: the
	// reference system does not say).
	DeregisterResponse struct {
		Leftovers []*structs.Leftover `json:"leftovers"`
		Index     uint64              `json:"index"`
	}
	// NodeDeregisterResponse answers DELETE /v1/node/ID: the claims still
	// on the node (a forced deregister), whose node steps are skipped.
	NodeDeregisterResponse struct {
		SkippedNodeSteps []structs.NodeClaim `json:"skipped_node_steps"`
		Index            uint64              `json:"index"`
	}
	// GCResponse answers PUT /v1/system/gc.
	GCResponse struct {
		Volumes int `json:"volumes"`
	}
	// LeaderResponse answers GET /v1/status/leader.
	LeaderResponse struct {
		Address  string `json:"address"`
		IsLeader bool   `json:"is_leader"`
	}
	// NodeStatusRequest is the body of PUT /v1/node/ID/status.
	NodeStatusRequest struct {
		Status structs.NodeStatus `json:"status"`
	}
	// NodeFenceRequest is the body of PUT /v1/node/ID/fence: why the
	// operator knows the node is off.
	NodeFenceRequest struct {
		Reason string `json:"reason"`
	}
	// ForceCheck says whether `volume deregister -force` would be allowed
	// now: only when every allocation holding a claim is terminal or gone.
	ForceCheck struct {
		Allowed    bool     `json:"allowed"`
		LiveAllocs []string `json:"live_allocs,omitempty"`
	}
	// VolumeResponse answers GET /v1/volume/ID: the volume (secrets
	// redacted) and whether force-deregister is allowed now.
	VolumeResponse struct {
		*structs.Volume
		ForceDeregister ForceCheck `json:"force_deregister"`
	}
)

// volumeJSON is a volume as the API answers it: "claims" is always there,
// {} for none, in the list and the detail alike, so a script reads claims
// one way (`volume status -json` seemed to omit claims the table showed). The shallower Claims field wins over the embedded volume's.
type volumeJSON struct {
	*structs.Volume
	Claims map[string]*structs.Claim `json:"claims"`
}

func newVolumeJSON(v *structs.Volume) volumeJSON {
	claims := v.Claims
	if claims == nil {
		claims = map[string]*structs.Claim{}
	}
	return volumeJSON{Volume: v, Claims: claims}
}

// MarshalJSON answers the volume with its claims always present.
func (r VolumeResponse) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // as WriteJSON: "<redacted>" stays readable
	err := enc.Encode(struct {
		volumeJSON
		ForceDeregister ForceCheck `json:"force_deregister"`
	}{newVolumeJSON(r.Volume), r.ForceDeregister})
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), err
}

// Redacted replaces secret values in API answers.
const Redacted = "<redacted>"

func (s *Server) routes() {
	m := s.mux
	m.HandleFunc("GET /v1/volumes", s.listVolumes)
	m.HandleFunc("PUT /v1/volumes", s.registerVolumes)
	m.HandleFunc("POST /v1/volumes", s.registerVolumes)
	m.HandleFunc("GET /v1/volumes/leftovers", s.listLeftovers)
	m.HandleFunc("DELETE /v1/volumes/leftovers", s.clearLeftovers)
	m.HandleFunc("GET /v1/volume/{id}", s.getVolume)
	m.HandleFunc("DELETE /v1/volume/{id}", s.deregisterVolume)
	m.HandleFunc("PUT /v1/volume/{id}/claim", s.claimVolume)
	m.HandleFunc("POST /v1/volume/{id}/claim", s.claimVolume)
	m.HandleFunc("PUT /v1/volume/{id}/detach", s.detachVolume)
	m.HandleFunc("POST /v1/volume/{id}/detach", s.detachVolume)

	m.HandleFunc("GET /v1/nodes", s.listNodes)
	m.HandleFunc("PUT /v1/nodes", s.registerNode)
	m.HandleFunc("POST /v1/nodes", s.registerNode)
	m.HandleFunc("GET /v1/node/{id}", s.getNode)
	m.HandleFunc("DELETE /v1/node/{id}", s.deregisterNode)
	m.HandleFunc("PUT /v1/node/{id}/status", s.nodeStatus)
	m.HandleFunc("POST /v1/node/{id}/status", s.nodeStatus)
	m.HandleFunc("PUT /v1/node/{id}/fence", s.fenceNode)
	m.HandleFunc("DELETE /v1/node/{id}/fence", s.unfenceNode)

	m.HandleFunc("GET /v1/plugins", s.listPlugins)
	m.HandleFunc("PUT /v1/plugins", s.registerPlugin)
	m.HandleFunc("POST /v1/plugins", s.registerPlugin)
	m.HandleFunc("GET /v1/plugin/{id}", s.getPlugin)
	m.HandleFunc("DELETE /v1/plugin/{id}", s.deregisterPlugin)

	m.HandleFunc("GET /v1/allocs", s.listAllocs)
	m.HandleFunc("PUT /v1/allocs", s.upsertAllocs)
	m.HandleFunc("POST /v1/allocs", s.upsertAllocs)
	m.HandleFunc("GET /v1/alloc/{id}", s.getAlloc)

	m.HandleFunc("GET /v1/events", s.listEvents)
	m.HandleFunc("PUT /v1/system/gc", s.systemGC)
	m.HandleFunc("POST /v1/system/gc", s.systemGC)
	m.HandleFunc("GET /v1/status/leader", s.leader)
	m.HandleFunc("GET /v1/metrics", s.serveMetrics)

	// An empty ID is a bad request naming the field, not an unknown route.
	for prefix, field := range map[string]string{"volume": "volume_id", "node": "node_id", "plugin": "plugin_id", "alloc": "alloc_id"} {
		m.HandleFunc("/v1/"+prefix+"/{$}", func(w http.ResponseWriter, _ *http.Request) {
			WriteError(w, badRequest(field, "must not be empty"))
		})
	}
}

// read runs a blocking read: fn fills the answer and returns its index.
// The answer is written only once the query settles.
func (s *Server) read(w http.ResponseWriter, r *http.Request, fn func(ws memdb.WatchSet, rd Reader) (any, uint64, error)) {
	minIndex, wait, err := blockingParams(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	if wait == 0 {
		// ?wait=0s asks for the answer now, whatever the index.
		minIndex = 0
	}
	ctx := r.Context()
	if minIndex > 0 {
		release, ok := s.acquireBlocking(w)
		if !ok {
			return
		}
		defer release()
		var stop func()
		ctx, stop = s.untilRevoked(r)
		defer stop()
	}
	var out any
	index, err := s.store.Query(ctx, minIndex, wait, func(ws memdb.WatchSet, rd Reader) (uint64, error) {
		v, idx, err := fn(ws, rd)
		if err != nil {
			return 0, err
		}
		out = v
		return idx, nil
	})
	if minIndex > 0 {
		if rerr := s.revokedError(ctx, r); rerr != nil {
			err = rerr // what it read may no longer be shown to it
		}
	}
	if err != nil {
		WriteError(w, err)
		return
	}
	setIndex(w, index)
	WriteJSON(w, http.StatusOK, out)
}

// maxIndex returns the highest index of the given tables.
func maxIndex(rd Reader, tables ...string) (uint64, error) {
	var m uint64
	for _, t := range tables {
		i, err := rd.Index(t)
		if err != nil {
			return 0, err
		}
		m = max(m, i)
	}
	return m, nil
}

// redact copies v with its secret values hidden: API reads never show them.
func redact(v *structs.Volume) *structs.Volume {
	if len(v.Secrets) == 0 {
		return v
	}
	c := v.Copy()
	for k := range c.Secrets {
		c.Secrets[k] = Redacted
	}
	return c
}

func (s *Server) listVolumes(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("namespace")
	if ns != "" {
		if err := ValidateID("namespace", ns); err != nil {
			WriteError(w, err)
			return
		}
	}
	plugin := r.URL.Query().Get("plugin_id")
	if plugin != "" {
		if err := ValidateID("plugin_id", plugin); err != nil {
			WriteError(w, err)
			return
		}
	}
	filter, only, err := volumeFilter(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	pp, err := s.pageParams(r, volumesList)
	if err != nil {
		WriteError(w, err)
		return
	}
	s.read(w, r, func(ws memdb.WatchSet, rd Reader) (any, uint64, error) {
		// Walk the ID index from the page's first key and stop once the
		// page is full: a page costs its size (plus the volumes the
		// filters skip), not the table's (BenchmarkScale reads a page both
		// ways at 1,000,000 volumes).
		fromNS, fromID, _ := strings.Cut(pp.start, "\x00")
		if ns != "" && fromNS < ns {
			fromNS, fromID = ns, ""
		}
		walk := rd.VolumesFrom
		switch only {
		case onlyStuck:
			// ?stuck=true walks the stuck volumes' own index, in the same
			// key order (so the same next_token), instead of skipping
			// every volume that is not stuck.
			walk = rd.StuckVolumesFrom
		case onlyClaimed:
			// ?claim_state=S (a state, not "unclaimed") walks the claims
			// by volume, in the same key order: O(claims), not O(volumes)
			// (host/state/claimed_volumes.go).
			walk = rd.ClaimedVolumesFrom
		}
		next, err := walk(ws, fromNS, fromID)
		if err != nil {
			return nil, 0, err
		}
		out := make([]volumeJSON, 0, min(pp.perPage, 1024))
		pp.setNext(w, "")
		for v := next(); v != nil; v = next() {
			if ns != "" && v.Namespace != ns {
				break // past the namespace in key order
			}
			if (plugin != "" && v.PluginID != plugin) || !filter(v) {
				continue
			}
			if len(out) == pp.perPage {
				pp.setNext(w, volumeKey(v.Namespace, v.ID))
				break
			}
			out = append(out, newVolumeJSON(redact(v))) // redact (copy) only what is answered
		}
		idx, err := rd.Index(tableVolumes)
		return out, idx, err
	})
}

// unclaimedState is the ?claim_state= value that selects volumes without claims.
const unclaimedState = "unclaimed"

// volumeFilter reads the list filters the UI uses, applied
// before paging so a page is always full:
//
//	?claim_state=S  volumes with a claim in state S ("unclaimed": none)
//	?stuck=true     stuck volumes only (false: not stuck)
//	?search=TEXT    volumes whose ID or name contains TEXT
//
// only says which volumes alone can match, so the caller may walk just
// those: the stuck ones for ?stuck=true, the claimed ones for a claim state.
func volumeFilter(r *http.Request) (match func(*structs.Volume) bool, only walkOnly, err error) {
	q := r.URL.Query()
	state := structs.ClaimState(q.Get("claim_state"))
	if state != "" && state != unclaimedState && !state.Valid() {
		return nil, onlyAll, badChoice("claim_state", state, append(append([]structs.ClaimState{}, structs.ClaimStates...), unclaimedState)...)
	}
	var stuck *bool
	// An empty ?stuck= is no filter, like every other empty parameter; it
	// used to read as stuck=false and hide the stuck volumes.
	if q.Get("stuck") != "" {
		b, err := queryBool(r, "stuck")
		if err != nil {
			return nil, onlyAll, err
		}
		stuck = &b
	}
	search := q.Get("search")
	if len(search) > 256 {
		return nil, onlyAll, badRequest("search", "longer than 256 characters")
	}
	switch {
	case stuck != nil && *stuck:
		only = onlyStuck
	case state != "" && state != unclaimedState:
		only = onlyClaimed
	}
	return func(v *structs.Volume) bool {
		if stuck != nil && (v.Stuck != nil) != *stuck {
			return false
		}
		if search != "" && !strings.Contains(v.ID, search) && !strings.Contains(v.Name, search) {
			return false
		}
		switch state {
		case "":
			return true
		case unclaimedState:
			return len(v.Claims) == 0
		}
		for _, c := range v.Claims {
			if c.State == state {
				return true
			}
		}
		return false
	}, only, nil
}

// walkOnly is the subset of the volumes a list filter can match.
type walkOnly int

const (
	onlyAll walkOnly = iota
	onlyStuck
	onlyClaimed
)

// volumeRef reads the namespace (?namespace=, "default" when omitted) and
// the {id} of a volume route, each validated.
func volumeRef(r *http.Request) (ns, id string, err error) {
	if id, err = pathID(r, "volume_id"); err != nil {
		return "", "", err
	}
	if ns, err = namespace(r); err != nil {
		return "", "", err
	}
	return ns, id, nil
}

func (s *Server) getVolume(w http.ResponseWriter, r *http.Request) {
	ns, id, err := volumeRef(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	s.read(w, r, func(ws memdb.WatchSet, rd Reader) (any, uint64, error) {
		v, err := rd.VolumeByID(ws, ns, id)
		if err == nil && v == nil {
			err = structs.NotFound("volume", ns+"/"+id)
		}
		if err != nil {
			return nil, 0, err
		}
		fc, err := forceCheck(ws, rd, v)
		if err != nil {
			return nil, 0, err
		}
		idx, err := maxIndex(rd, tableVolumes, tableAllocs)
		return &VolumeResponse{Volume: redact(v), ForceDeregister: fc}, idx, err
	})
}

// forceCheck applies force-deregister's rule (as the reference scheduler's
// `volume deregister -force`): every claim's allocation terminal or gone.
func forceCheck(ws memdb.WatchSet, rd Reader, v *structs.Volume) (ForceCheck, error) {
	fc := ForceCheck{Allowed: true}
	for allocID := range v.Claims {
		a, err := rd.AllocByID(ws, allocID)
		if err != nil {
			return fc, err
		}
		if a != nil && !a.ClientStatus.Terminal() {
			fc.Allowed = false
			fc.LiveAllocs = append(fc.LiveAllocs, allocID)
		}
	}
	slices.Sort(fc.LiveAllocs)
	return fc, nil
}

// VolumesRequest is the body of PUT /v1/volumes.
type VolumesRequest = structs.VolumeRegisterRequest

func (s *Server) registerVolumes(w http.ResponseWriter, r *http.Request) {
	vols, err := decodeList(s, w, r, "volumes", "volumes",
		func(req *VolumesRequest) []*structs.Volume { return req.Volumes },
		func(v *structs.Volume) error {
			if v.Namespace == "" {
				v.Namespace = DefaultNamespace
			}
			return nil
		})
	if err != nil {
		WriteError(w, err)
		return
	}
	index, err := s.backend.RegisterVolumes(r.Context(), vols)
	s.answerIndex(w, index, err)
}

func (s *Server) answerIndex(w http.ResponseWriter, index uint64, err error) {
	if err != nil {
		WriteError(w, err)
		return
	}
	setIndex(w, index)
	WriteJSON(w, http.StatusOK, IndexResponse{Index: index})
}

func (s *Server) deregisterVolume(w http.ResponseWriter, r *http.Request) {
	ns, id, err := volumeRef(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	force, err := queryBool(r, "force")
	if err != nil {
		WriteError(w, err)
		return
	}
	left, index, err := s.backend.DeregisterVolume(r.Context(), ns, id, force)
	if err != nil {
		WriteError(w, err)
		return
	}
	if left == nil {
		left = []*structs.Leftover{}
	}
	setIndex(w, index)
	WriteJSON(w, http.StatusOK, DeregisterResponse{Leftovers: left, Index: index})
}

func (s *Server) claimVolume(w http.ResponseWriter, r *http.Request) {
	ns, id, err := volumeRef(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	var req structs.ClaimRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		WriteError(w, err)
		return
	}
	// The path names the volume; a body that names another is a mistake.
	if req.VolumeID != "" && req.VolumeID != id {
		WriteError(w, badRequest("volume_id", "body names volume %q but the path names %q", req.VolumeID, id))
		return
	}
	if req.Namespace != "" && r.URL.Query().Get("namespace") != "" && req.Namespace != ns {
		WriteError(w, badRequest("namespace", "body names namespace %q but the query names %q", req.Namespace, ns))
		return
	}
	if req.Namespace == "" {
		req.Namespace = ns
	}
	req.VolumeID = id
	if err := ValidateID("alloc_id", req.AllocID); err != nil {
		WriteError(w, err)
		return
	}
	if err := ValidateID("node_id", req.NodeID); err != nil {
		WriteError(w, err)
		return
	}
	if !req.Mode.Valid() {
		WriteError(w, badChoice("mode", req.Mode, structs.ClaimRead, structs.ClaimWrite))
		return
	}
	claim, err := s.backend.ClaimVolume(r.Context(), &req)
	if err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, claim)
}

func (s *Server) detachVolume(w http.ResponseWriter, r *http.Request) {
	ns, id, err := volumeRef(r)
	if err != nil {
		WriteError(w, err)
		return
	}
	node := r.URL.Query().Get("node")
	if err := ValidateID("node", node); err != nil {
		WriteError(w, err)
		return
	}
	res, err := s.backend.DetachVolume(r.Context(), ns, id, node)
	if err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, res)
}

func (s *Server) listLeftovers(w http.ResponseWriter, r *http.Request) {
	pp, err := s.pageParams(r, leftoversList)
	if err != nil {
		WriteError(w, err)
		return
	}
	s.read(w, r, func(ws memdb.WatchSet, rd Reader) (any, uint64, error) {
		left, err := rd.Leftovers(ws)
		if err != nil {
			return nil, 0, err
		}
		left = paginate(w, left, func(l *structs.Leftover) string { return l.ID }, pp)
		if left == nil {
			left = []*structs.Leftover{}
		}
		idx, err := rd.Index(tableLeftovers)
		return left, idx, err
	})
}

// clearLeftovers takes the IDs either as a JSON body
// {"ids": [...], "all": bool} or as ?id=...&id=... / ?all=true.
func (s *Server) clearLeftovers(w http.ResponseWriter, r *http.Request) {
	var req structs.LeftoversClearRequest
	if r.ContentLength != 0 {
		if err := s.decodeBody(w, r, &req); err != nil {
			WriteError(w, err)
			return
		}
	} else {
		all, err := queryBool(r, "all")
		if err != nil {
			WriteError(w, err)
			return
		}
		req.All = all
		req.IDs = r.URL.Query()["id"]
	}
	switch {
	case req.All && len(req.IDs) > 0:
		WriteError(w, badRequest("ids", "give leftover IDs or all, not both"))
		return
	case !req.All && len(req.IDs) == 0:
		WriteError(w, badRequest("ids", "give leftover IDs to clear, or all"))
		return
	}
	for _, id := range req.IDs {
		if id == "" {
			WriteError(w, badRequest("ids", "must not hold an empty ID"))
			return
		}
	}
	index, err := s.backend.ClearLeftovers(r.Context(), req.IDs, req.All)
	s.answerIndex(w, index, err)
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	listAll(s, w, r, nodesList, tableNodes, Reader.Nodes, func(n *structs.Node) string { return n.ID })
}

func (s *Server) getNode(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "node", "node", tableNodes, Reader.NodeByID)
}

func (s *Server) registerNode(w http.ResponseWriter, r *http.Request) {
	node, err := decodeOne(s, w, r, "node",
		func(req *structs.NodeUpsertRequest) *structs.Node { return req.Node },
		func(n *structs.Node) string { return n.ID })
	if err != nil {
		WriteError(w, err)
		return
	}
	if err := s.checkNodeRegistration(r, node); err != nil {
		s.log.Info("request denied", "method", r.Method, "path", r.URL.Path, "accessor", identityOf(r).Accessor(), "reason", err.Error())
		WriteError(w, err)
		return
	}
	// Which token registered the node is the server's to say: the state
	// store refuses the registration if that token is revoked before it
	// commits (structs.Node.RegisteredBy), and judges its operator
	// fields by that token's policies, or the anonymous policy's, then.
	node.RegisteredBy = ""
	if id := identityOf(r); s.auth.cfg != nil && id != nil {
		node.RegisteredBy = id.Accessor()
	}
	n, err := s.backend.RegisterNode(r.Context(), node)
	if err != nil {
		WriteError(w, s.probeError(r, err))
		return
	}
	s.warnMissingController(r, w, n)
	setIndex(w, n.ModifyIndex)
	WriteJSON(w, http.StatusOK, n)
}

// warnMissingController answers a Warning header per plugin of the node
// that would silently skip ControllerUnpublish (structs.
// MissingControllerWarnings), which the CLI prints, and logs each at WARN
// for the agent's operator. A failed read only loses the warning: the
// registration itself succeeded.
func (s *Server) warnMissingController(r *http.Request, w http.ResponseWriter, n *structs.Node) {
	plugins := map[string]*structs.Plugin{}
	_, _ = s.store.Query(r.Context(), 0, 0, func(_ memdb.WatchSet, rd Reader) (uint64, error) {
		for id := range n.Plugins {
			if p, err := rd.PluginByID(nil, id); err == nil && p != nil {
				plugins[id] = p
			}
		}
		return 0, nil
	})
	warnings := structs.MissingControllerWarnings(n, func(id string) *structs.Plugin { return plugins[id] })
	for _, msg := range warnings {
		s.log.Warn(msg)
	}
	setWarnings(w, warnings)
}

func (s *Server) nodeStatus(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "node_id")
	if err != nil {
		WriteError(w, err)
		return
	}
	var req NodeStatusRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		WriteError(w, err)
		return
	}
	if !req.Status.Valid() {
		WriteError(w, badChoice("status", req.Status, structs.NodeReady, structs.NodeDown))
		return
	}
	index, err := s.backend.UpdateNodeStatus(r.Context(), id, req.Status)
	s.answerIndex(w, index, err)
}

// fenceNode records an operator's attestation that a node is off; its
// claims then skip their node steps.
func (s *Server) fenceNode(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "node_id")
	if err != nil {
		WriteError(w, err)
		return
	}
	var req NodeFenceRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		WriteError(w, err)
		return
	}
	if strings.TrimSpace(req.Reason) == "" {
		WriteError(w, badRequest("reason", "is required: say why the node is known to be off"))
		return
	}
	index, err := s.backend.FenceNode(r.Context(), id, req.Reason, identityOf(r).Accessor())
	s.answerIndex(w, index, err)
}

func (s *Server) unfenceNode(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "node_id")
	if err != nil {
		WriteError(w, err)
		return
	}
	index, err := s.backend.UnfenceNode(r.Context(), id, identityOf(r).Accessor())
	s.answerIndex(w, index, err)
}

// deregisterNode removes a retired node (?force=true: even with claims
// still on it, whose node steps are then skipped).
func (s *Server) deregisterNode(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "node_id")
	if err != nil {
		WriteError(w, err)
		return
	}
	force, err := queryBool(r, "force")
	if err != nil {
		WriteError(w, err)
		return
	}
	claims, index, err := s.backend.DeregisterNode(r.Context(), id, force)
	if err != nil {
		WriteError(w, err)
		return
	}
	if claims == nil {
		claims = []structs.NodeClaim{}
	}
	setIndex(w, index)
	WriteJSON(w, http.StatusOK, NodeDeregisterResponse{SkippedNodeSteps: claims, Index: index})
}

// deregisterPlugin removes a plugin no volume uses.
func (s *Server) deregisterPlugin(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "plugin_id")
	if err != nil {
		WriteError(w, err)
		return
	}
	index, err := s.backend.DeregisterPlugin(r.Context(), id)
	s.answerIndex(w, index, err)
}

func (s *Server) listPlugins(w http.ResponseWriter, r *http.Request) {
	listAll(s, w, r, pluginsList, tablePlugins, Reader.Plugins, func(p *structs.Plugin) string { return p.ID })
}

func (s *Server) getPlugin(w http.ResponseWriter, r *http.Request) {
	getOne(s, w, r, "plugin", "plugin", tablePlugins, Reader.PluginByID)
}

func (s *Server) registerPlugin(w http.ResponseWriter, r *http.Request) {
	plugin, err := decodeOne(s, w, r, "plugin",
		func(req *structs.PluginUpsertRequest) *structs.Plugin { return req.Plugin },
		func(p *structs.Plugin) string { return p.ID })
	if err != nil {
		WriteError(w, err)
		return
	}
	p, err := s.backend.RegisterPlugin(r.Context(), plugin)
	if err != nil {
		WriteError(w, s.probeError(r, err))
		return
	}
	setIndex(w, p.ModifyIndex)
	WriteJSON(w, http.StatusOK, p)
}

// listAllocs answers GET /v1/allocs (?node_id=, ?namespace=). Each run
// shows only the allocations of the namespaces the token may read then
// (visibleNow): the route's rule let it in, and a blocking list runs
// again at every wake.
func (s *Server) listAllocs(w http.ResponseWriter, r *http.Request) {
	node := r.URL.Query().Get("node_id")
	if node != "" {
		if err := ValidateID("node_id", node); err != nil {
			WriteError(w, err)
			return
		}
	}
	ns := r.URL.Query().Get("namespace")
	if ns != "" {
		if err := ValidateID("namespace", ns); err != nil {
			WriteError(w, err)
			return
		}
	}
	pp, err := s.pageParams(r, allocsList)
	if err != nil {
		WriteError(w, err)
		return
	}
	s.read(w, r, func(ws memdb.WatchSet, rd Reader) (any, uint64, error) {
		visible, err := s.visibleNow(r)
		if err != nil {
			return nil, 0, err
		}
		as, err := rd.Allocs(ws)
		if err != nil {
			return nil, 0, err
		}
		out := make([]*structs.Alloc, 0, len(as))
		for _, a := range as {
			if (node == "" || a.NodeID == node) && (ns == "" || orDefault(a.Namespace) == ns) && visible(orDefault(a.Namespace)) {
				out = append(out, a)
			}
		}
		out = paginate(w, out, func(a *structs.Alloc) string { return a.ID }, pp)
		idx, err := rd.Index(tableAllocs)
		return out, idx, err
	})
}

// getAlloc answers GET /v1/alloc/ID (?namespace=). An allocation in
// another namespace than the one asked is not found, as a volume is; one
// in a namespace the token may not read (checked at every run of a
// blocking read) is refused as the route's rule refuses it.
func (s *Server) getAlloc(w http.ResponseWriter, r *http.Request) {
	id, err := pathID(r, "alloc_id")
	if err != nil {
		WriteError(w, err)
		return
	}
	ns := r.URL.Query().Get("namespace")
	if ns != "" {
		if err := ValidateID("namespace", ns); err != nil {
			WriteError(w, err)
			return
		}
	}
	s.read(w, r, func(ws memdb.WatchSet, rd Reader) (any, uint64, error) {
		a, err := rd.AllocByID(ws, id)
		if err == nil && (a == nil || (ns != "" && orDefault(a.Namespace) != ns)) {
			err = structs.NotFound("allocation", id)
		}
		if err != nil {
			return nil, 0, err
		}
		if err := s.allowedNow(r, acl.NamespaceRead, nsAllocPath, orDefault(a.Namespace)); err != nil {
			return nil, 0, err
		}
		idx, err := rd.Index(tableAllocs)
		return a, idx, err
	})
}

func (s *Server) upsertAllocs(w http.ResponseWriter, r *http.Request) {
	allocs, err := decodeList(s, w, r, "allocs", "allocations",
		func(req *structs.AllocUpsertRequest) []*structs.Alloc { return req.Allocs },
		func(a *structs.Alloc) error { return ValidateID("allocs.id", a.ID) })
	if err != nil {
		WriteError(w, err)
		return
	}
	index, err := s.backend.UpsertAllocs(r.Context(), allocs)
	s.answerIndex(w, index, err)
}

func (s *Server) systemGC(w http.ResponseWriter, r *http.Request) {
	n, err := s.backend.SystemGC(r.Context())
	if err != nil {
		WriteError(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, GCResponse{Volumes: n})
}

// leader doubles as the health check: 503 while no leader is known.
func (s *Server) leader(w http.ResponseWriter, r *http.Request) {
	addr, isLeader := s.backend.Leader()
	if addr == "" && !isLeader {
		WriteError(w, structs.ErrNoLeader)
		return
	}
	WriteJSON(w, http.StatusOK, LeaderResponse{Address: addr, IsLeader: isLeader})
}

func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if s.metrics == nil {
		WriteError(w, &httpError{status: http.StatusNotFound, msg: "metrics are not enabled"})
		return
	}
	s.metrics.ServeHTTP(w, r)
}

// getOne answers GET /v1/<prefix>/{id}: the object from table, or a 404
// naming it by noun (prose says "allocation"; the parameter is alloc_id).
func getOne[T any](s *Server, w http.ResponseWriter, r *http.Request, prefix, noun, table string,
	get func(Reader, memdb.WatchSet, string) (*T, error)) {
	id, err := pathID(r, prefix+"_id")
	if err != nil {
		WriteError(w, err)
		return
	}
	s.read(w, r, func(ws memdb.WatchSet, rd Reader) (any, uint64, error) {
		obj, err := get(rd, ws, id)
		if err == nil && obj == nil {
			err = structs.NotFound(noun, id)
		}
		if err != nil {
			return nil, 0, err
		}
		idx, err := rd.Index(table)
		return obj, idx, err
	})
}

// listAll answers a list route with a page of the objects of table ([]
// when empty); key is the object's sort key in the table.
func listAll[T any](s *Server, w http.ResponseWriter, r *http.Request, pl pageList, table string,
	list func(Reader, memdb.WatchSet) ([]*T, error), key func(*T) string) {
	pp, err := s.pageParams(r, pl)
	if err != nil {
		WriteError(w, err)
		return
	}
	s.read(w, r, func(ws memdb.WatchSet, rd Reader) (any, uint64, error) {
		objs, err := list(rd, ws)
		if err != nil {
			return nil, 0, err
		}
		objs = paginate(w, objs, key, pp)
		if objs == nil {
			objs = []*T{}
		}
		idx, err := rd.Index(table)
		return objs, idx, err
	})
}
