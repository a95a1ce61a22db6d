package server

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/volhost/volhost/host/csi"
	"github.com/volhost/volhost/host/structs"
)

// RegisterPlugin probes the plugin's controller endpoint (when it has one)
// for its identity and capabilities, then records it. A controller that does
// not answer is refused: recording it would only defer the failure to the
// first detach.
func (s *Server) RegisterPlugin(ctx context.Context, p *structs.Plugin) (*structs.Plugin, error) {
	if p == nil || p.ID == "" {
		return nil, structs.Invalid("id", "plugin ID is required")
	}
	p = p.Copy()
	if p.ControllerEndpoint != "" {
		// A malformed endpoint is the caller's mistake, a 400 naming the
		// accepted forms; only a dial failure is a probe error, whose
		// detail the API may hide. Checked first, the format error used to
		// reach the caller as "endpoint unreachable" with the reason in
		// the agent's log only.
		if err := structs.ValidateEndpoint("controller_endpoint", p.ControllerEndpoint); err != nil {
			return nil, err
		}
		probed, err := s.csi.ProbeController(ctx, p.ControllerEndpoint)
		if err != nil {
			return nil, &structs.ProbeError{Field: "controller_endpoint", Endpoint: p.ControllerEndpoint, Err: err}
		}
		p.Provider, p.Version, p.Capabilities = probed.Provider, probed.Version, probed.Capabilities
	}
	if _, _, err := s.log.Apply(ctx, structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: p}); err != nil {
		return nil, err
	}
	return s.store.Snapshot().PluginByID(nil, p.ID)
}

// RegisterNode probes every CSI node plugin endpoint of the node for the
// external node ID (NodeGetInfo) and staging capability, then records it.
// The external node ID is learnt here, once, so a release never has to ask
// a node that may be gone (hashicorp/nomad#25349: "missing external node ID").
func (s *Server) RegisterNode(ctx context.Context, n *structs.Node) (*structs.Node, error) {
	if n == nil || n.ID == "" {
		return nil, structs.Invalid("id", "node ID is required")
	}
	for id, np := range n.Plugins {
		if np == nil {
			// Checked before anything reads the entry (a null entry panicked).
			return nil, structs.Invalid(fmt.Sprintf("node.plugins[%s]", id), "is null: give the plugin's endpoint, or {} for none")
		}
	}
	if err := checkRootDir(n.RootDir); err != nil {
		return nil, err
	}
	n = n.Copy()
	if n.Status == "" {
		n.Status = structs.NodeReady
	}
	if n.RootDir == "" && hasEndpoint(n) {
		// The CO provides the staging directory and the target's parent
		// (CSI spec, NodeStageVolume/NodePublishVolume), so it needs a root
		// to make them under; without one, paths were relative, which the
		// spec forbids and drivers refuse. A node registered without one
		// gets a default beside the driver on this machine (direct mode is
		// for single-box use), shown by `node status`.
		n.RootDir = DefaultNodeRoot(n.ID)
		s.logger.Info("node registered without root_dir: staging and target paths go under the default", "node", n.ID, "root_dir", n.RootDir)
	}
	n.LastSeen = s.clock.Now()
	for id, np := range n.Plugins {
		np.PluginID = id
		// Only a node agent reports a probe it could not make; here the
		// server probes, and a failed probe refuses the registration.
		np.ProbeError = ""
		if np.Endpoint == "" {
			continue
		}
		field := fmt.Sprintf("plugins.%s.endpoint", id)
		if err := structs.ValidateEndpoint(field, np.Endpoint); err != nil {
			return nil, err // a 400 naming the rule, as for a plugin's controller
		}
		probed, err := s.csi.ProbeNode(ctx, np.Endpoint)
		if err != nil {
			return nil, &structs.ProbeError{Field: field, Endpoint: np.Endpoint, Err: err}
		}
		np.ExternalNodeID, np.StageUnstage, np.MaxVolumes = probed.ExternalNodeID, probed.StageUnstage, probed.MaxVolumes
		np.ControllerService = probed.ControllerService
	}
	if _, _, err := s.log.Apply(ctx, structs.NodeUpsertType, registration(n, structs.ThroughAPI)); err != nil {
		return nil, err
	}
	// A plugin that would skip ControllerUnpublish is warned of by the
	// API, which answers the warning and logs it (api.warnMissingController).
	return s.store.Snapshot().NodeByID(nil, n.ID)
}

// DefaultNodeRoot is the root_dir of a node registered with plugin
// endpoints but none of its own: TMPDIR/volhost/nodes/ID (ID escaped to
// one path element as csi.Paths escapes IDs).
func DefaultNodeRoot(nodeID string) string {
	return filepath.Join(os.TempDir(), "volhost", "nodes", csi.PathElem(nodeID))
}

func hasEndpoint(n *structs.Node) bool {
	for _, np := range n.Plugins {
		if np != nil && np.Endpoint != "" {
			return true
		}
	}
	return false
}

// UpdateNodeStatus marks a node ready or down.
func (s *Server) UpdateNodeStatus(ctx context.Context, id string, status structs.NodeStatus) (uint64, error) {
	idx, _, err := s.log.Apply(ctx, structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{
		NodeID: id, Status: status, LastSeen: s.clock.Now(),
	})
	return idx, err
}

// RegisterVolumes records volumes.
func (s *Server) RegisterVolumes(ctx context.Context, vols []*structs.Volume) (uint64, error) {
	for i, v := range vols {
		if v == nil {
			return 0, structs.Invalid(fmt.Sprintf("volumes[%d]", i), "empty volume")
		}
		if v.Namespace == "" {
			v.Namespace = "default"
		}
	}
	idx, _, err := s.log.Apply(ctx, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols})
	return idx, err
}

// DeregisterVolume removes a volume. Without force it is refused while the
// volume has claims; with force it is refused while an allocation using it
// is live, and otherwise drops the claims without CSI calls and answers with
// the attachments that may be left behind (hashicorp/nomad#8641).
func (s *Server) DeregisterVolume(ctx context.Context, ns, id string, force bool) ([]*structs.Leftover, uint64, error) {
	if ns == "" {
		ns = "default"
	}
	reason := "operator"
	if force {
		reason = "operator force"
	}
	idx, resp, err := s.log.Apply(ctx, structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{
		Namespace: ns, VolumeID: id, Force: force, Reason: reason, Time: s.clock.Now(),
	})
	if err != nil {
		return nil, 0, err
	}
	leftovers, _ := resp.([]*structs.Leftover)
	return leftovers, idx, nil
}

// UpsertAllocs records allocations or their new client status. An allocation
// turning terminal bumps the volumes it claims, which wakes the watcher.
func (s *Server) UpsertAllocs(ctx context.Context, allocs []*structs.Alloc) (uint64, error) {
	now := s.clock.Now()
	for i, a := range allocs {
		if a == nil {
			return 0, structs.Invalid(fmt.Sprintf("allocs[%d]", i), "empty allocation")
		}
		if a.Namespace == "" {
			a.Namespace = "default"
		}
		a.ModifyTime = now
	}
	idx, _, err := s.log.Apply(ctx, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: allocs, KeepNamespace: true})
	return idx, err
}

// ClearLeftovers forgets leftovers the operator has dealt with.
func (s *Server) ClearLeftovers(ctx context.Context, ids []string, all bool) (uint64, error) {
	idx, _, err := s.log.Apply(ctx, structs.LeftoversClearType, &structs.LeftoversClearRequest{IDs: ids, All: all})
	return idx, err
}

// DetachVolume runs the release steps for a node's releasable claims now.
func (s *Server) DetachVolume(ctx context.Context, ns, id, nodeID string) (*structs.DetachResult, error) {
	if ns == "" {
		ns = "default"
	}
	if err := s.leaderOnly(); err != nil {
		return nil, err
	}
	return s.release.Detach(ctx, ns, id, nodeID)
}

// SystemGC writes the GC claim for every volume with releasable claims.
func (s *Server) SystemGC(ctx context.Context) (int, error) {
	if err := s.leaderOnly(); err != nil {
		return 0, err
	}
	return s.release.GC(ctx)
}

func (s *Server) leaderOnly() error {
	if s.release == nil || !s.log.IsLeader() {
		return fmt.Errorf("this server does not lead the cluster: %w", structs.ErrNoLeader)
	}
	return nil
}

// FenceNode records an operator's attestation that node id is off: its
// claims skip their node steps and go to the controller step, and it takes
// no new claim until unfenced. A timeout never calls this: a
// forced detach of a node that is only slow corrupts data (Kubernetes
// #120344), so only an operator, or a module confirming a fence, does.
func (s *Server) FenceNode(ctx context.Context, id, reason, accessor string) (uint64, error) {
	if accessor == "" {
		accessor = "anonymous"
	}
	idx, _, err := s.log.Apply(ctx, structs.NodeFenceType, &structs.NodeFenceRequest{NodeID: id,
		Fence: &structs.NodeFence{Reason: reason, Source: "operator", Accessor: accessor, Time: s.clock.Now()}})
	return idx, err
}

// UnfenceNode lifts a node's fence; a node that heartbeats takes claims again.
func (s *Server) UnfenceNode(ctx context.Context, id, accessor string) (uint64, error) {
	if accessor == "" {
		accessor = "anonymous"
	}
	idx, _, err := s.log.Apply(ctx, structs.NodeFenceType, &structs.NodeFenceRequest{NodeID: id, Accessor: accessor})
	return idx, err
}

// RegisterAgentNode records a node as its node agent reported it: the agent probed its node-local plugin sockets itself, so nothing
// is dialled from here. The heartbeat fields and the fence belong to the
// store: a reconnecting agent keeps its node's status, which its next
// heartbeat moves back to ready through the tracker (with an event).
func (s *Server) RegisterAgentNode(ctx context.Context, n *structs.Node) (*structs.Node, error) {
	if n == nil || n.ID == "" {
		return nil, structs.Invalid("id", "node ID is required")
	}
	for id, np := range n.Plugins {
		if np == nil {
			return nil, structs.Invalid(fmt.Sprintf("node.plugins[%s]", id), "is null")
		}
	}
	if err := checkRootDir(n.RootDir); err != nil {
		return nil, err
	}
	n = n.Copy()
	n.Agent = true
	n.Status, n.HeartbeatLost, n.StatusReason, n.StatusSince, n.Fence = structs.NodeReady, false, "", time.Time{}, nil
	n.LastSeen = s.clock.Now()
	old, err := s.store.Snapshot().NodeByID(nil, n.ID)
	if err != nil {
		return nil, err
	}
	if old != nil {
		n.Status, n.HeartbeatLost, n.StatusReason, n.StatusSince = old.Status, old.HeartbeatLost, old.StatusReason, old.StatusSince
	}
	for id, np := range n.Plugins {
		np.PluginID = id
	}
	if _, _, err := s.log.Apply(ctx, structs.NodeUpsertType, registration(n, structs.ByItsAgent)); err != nil {
		return nil, err
	}
	return s.store.Snapshot().NodeByID(nil, n.ID)
}

// NodeLiveness commits a heartbeat transition the tracker decided.
func (s *Server) NodeLiveness(ctx context.Context, req *structs.NodeLivenessRequest) error {
	_, _, err := s.log.Apply(ctx, structs.NodeLivenessType, req)
	return err
}

// SchedulerSync commits a scheduler source's batch (host/scheduler): its
// allocations, events and cursor in one entry, validated by the store
// and fenced by the leadership term the source runs under.
func (s *Server) SchedulerSync(ctx context.Context, req *structs.SchedulerSyncRequest) (uint64, error) {
	if req == nil {
		return 0, structs.Invalid("", "empty scheduler sync request")
	}
	if req.Term == 0 {
		// The FSM takes term 0 as unfenced (the store's own tests): a
		// source that forgot its term would be committed however late,
		// after this server was deposed.
		return 0, fmt.Errorf("scheduler %q sync without a leadership term: a source writes under the term it runs in: %w", req.Source, structs.ErrNoLeader)
	}
	for _, a := range req.Allocs {
		if a != nil && a.ModifyTime.IsZero() {
			a.ModifyTime = s.clock.Now()
		}
	}
	idx, _, err := s.log.Apply(ctx, structs.SchedulerSyncType, req)
	return idx, err
}

// checkRootDir refuses a root_dir that is not an absolute, clean path
// other than "/", whether an operator registers the node or its agent
// reports it in its hello. Staging and target paths are made under it
// (csi.Paths), and the CSI spec wants them absolute; a root_dir with ".."
// in it named one directory to the store, whose claims it must hold
// (structs.WithinRoot), and another to the driver once joined and
// cleaned; and under "/" no path is strictly within the root, so every
// node step would be refused after the claim was taken.
func checkRootDir(root string) error {
	if root == "" {
		return nil
	}
	if !filepath.IsAbs(root) || filepath.Clean(root) != root || root == string(filepath.Separator) {
		return structs.Invalid("node.root_dir", "%q must be an absolute, clean path other than / (staging and target paths are made under it): "+
			"set the node's root_dir to a directory such as /var/lib/volhost/<node>", root)
	}
	return nil
}

// registration is the store's request for registering n (a copy of the
// caller's node) the given way: the store judges it against the node as
// it stands at commit (NodeUpsertRequest.HoldOperatorFields), by the
// registering token or, for a request without one while ACLs are on, by
// the anonymous policy.
func registration(n *structs.Node, way structs.RegistrationWay) *structs.NodeUpsertRequest {
	r := &structs.NodeUpsertRequest{Node: n, HoldOperatorFields: way}
	if n.RegisteredBy == structs.AnonymousAccessor {
		n.RegisteredBy, r.Anonymous = "", true
	}
	return r
}
