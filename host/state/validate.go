package state

import (
	"cmp"

	memdb "github.com/hashicorp/go-memdb"

	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/volhost/volhost/host/acl"
	"github.com/volhost/volhost/host/structs"
)

// MaxIDLength bounds every ID (structs.ValidateID).
const MaxIDLength = structs.MaxIDLength

// Validate checks req (of message type t) against the snapshot without
// changing anything. The server calls it before writing to the log, so a
// refusal is an error to the caller and never a committed entry
// (hashicorp/nomad#27324); Apply calls it again inside its write transaction, so a request
// that raced another write is refused atomically instead of corrupting state.
//
// Errors are typed (host/structs/errors.go): *structs.ValidationError (400,
// naming the field), structs.ErrNotFound (404), structs.ErrConflict (409).
//
// IDs a request creates are held here to the strict rule of new IDs
// (structs.ValidateID); Apply holds committed entries to the rule of
// stored IDs only (ingress.go).
func (snap *Snapshot) Validate(t structs.MessageType, req any) error {
	o, ok := ops[t]
	if !ok {
		return structs.Invalid("type", "unknown message type %d", t)
	}
	if err := o.validate(snap, req); err != nil {
		return err // the same refusal Apply would give
	}
	return validateNewIDs(snap, t, req)
}

// op is one message type: its validation and its write.
type op struct {
	validate func(snap *Snapshot, req any) error
	apply    func(w *writer, req any) (any, error)
}

// mkOp adapts typed functions to op, accepting *T or T as the request.
func mkOp[T any](v func(*Snapshot, *T) error, a func(*writer, *T) (any, error)) op {
	return op{
		validate: func(snap *Snapshot, req any) error {
			r, err := asReq[T](req)
			if err != nil {
				return err
			}
			return v(snap, r)
		},
		apply: func(w *writer, req any) (any, error) {
			r, err := asReq[T](req)
			if err != nil {
				return nil, err
			}
			return a(w, r)
		},
	}
}

func asReq[T any](req any) (*T, error) {
	switch r := req.(type) {
	case *T:
		if r == nil {
			return nil, structs.Invalid("request", "is nil")
		}
		return r, nil
	case T:
		return &r, nil
	}
	return nil, structs.Invalid("request", "want %T, got %T", (*T)(nil), req)
}

// ops maps every message type to its validation and write.
var ops = map[structs.MessageType]op{
	structs.PluginUpsertType:      mkOp(validatePluginUpsert, (*writer).upsertPlugin),
	structs.PluginDeregisterType:  mkOp(validatePluginDeregister, (*writer).deregisterPlugin),
	structs.NodeUpsertType:        mkOp(validateNodeUpsert, (*writer).upsertNode),
	structs.NodeStatusUpdateType:  mkOp(validateNodeStatus, (*writer).updateNodeStatus),
	structs.NodeDeregisterType:    mkOp(validateNodeDeregister, (*writer).deregisterNode),
	structs.VolumeRegisterType:    mkOp(validateVolumeRegister, (*writer).registerVolumes),
	structs.VolumeDeregisterType:  mkOp(validateVolumeDeregister, (*writer).deregisterVolume),
	structs.AllocUpsertType:       mkOp(validateAPIAllocUpsert, (*writer).upsertAllocs),
	structs.AllocDeleteType:       mkOp(validateAllocDelete, (*writer).deleteAllocs),
	structs.VolumeClaimType:       mkOp(validateClaim, (*writer).claimVolume),
	structs.VolumeClaimRemoveType: mkOp(validateClaimRemove, (*writer).removeClaim),
	structs.ClaimCheckpointType:   mkOp(validateCheckpoint, (*writer).checkpointClaim),
	structs.VolumeStuckType:       mkOp(validateStuck, (*writer).markStuck),
	structs.ClaimGCType:           mkOp(validateGC, (*writer).gcClaims),
	structs.LeftoversClearType:    mkOp(validateLeftoversClear, (*writer).clearLeftovers),
	structs.EventAppendType:       mkOp(validateEvents, (*writer).appendEvents),
	// Group commit (batch.go).
	structs.ClaimCheckpointBatchType: mkOp(validateCheckpointBatch, (*writer).checkpointBatch),
}

// validEndpoint checks a CSI endpoint with the same rule the CSI client
// dials by (structs.ValidateEndpoint).
func validEndpoint(field, ep string) error { return structs.ValidateEndpoint(field, ep) }

// list renders IDs for an error message, sorted and bounded.
func list(ids []string) string {
	ids = append([]string(nil), ids...)
	sort.Strings(ids)
	const max = 5
	if len(ids) > max {
		return strings.Join(ids[:max], ", ") + fmt.Sprintf(" and %d more", len(ids)-max)
	}
	return strings.Join(ids, ", ")
}

func volName(ns, id string) string { return ns + "/" + id }

func validatePluginUpsert(snap *Snapshot, r *structs.PluginUpsertRequest) error {
	p := r.Plugin
	if p == nil {
		return structs.Invalid("plugin", "is required")
	}
	if err := validID("plugin.id", p.ID); err != nil {
		return err
	}
	if p.ControllerEndpoint != "" {
		if err := validEndpoint("plugin.controller_endpoint", p.ControllerEndpoint); err != nil {
			return err
		}
	} else if p.Capabilities.PublishUnpublish {
		return structs.Invalid("plugin.controller_endpoint", "is required when the plugin advertises PUBLISH_UNPUBLISH_VOLUME")
	}
	return validatePluginUnderClaims(snap, p)
}

func validatePluginDeregister(snap *Snapshot, r *structs.PluginDeregisterRequest) error {
	if err := validID("plugin_id", r.PluginID); err != nil {
		return err
	}
	_, err := mustExist(snap.PluginByID, "plugin", r.PluginID)
	if err != nil {
		return err
	}
	vols, err := snap.VolumesByPlugin(nil, r.PluginID)
	if err != nil {
		return err
	}
	if len(vols) > 0 {
		ids := make([]string, len(vols))
		for i, v := range vols {
			ids[i] = volName(v.Namespace, v.ID)
		}
		return structs.Conflict("plugin %q is used by %d volume(s): %s; deregister them first", r.PluginID, len(vols), list(ids))
	}
	return nil
}

func validateNodeUpsert(snap *Snapshot, r *structs.NodeUpsertRequest) error {
	if err := validateNodeShape(snap, r); err != nil {
		return err
	}
	if err := validateRegistrar(snap, r.Node); err != nil {
		return err
	}
	if err := validateOperatorFields(snap, r); err != nil {
		return err
	}
	if err := validateUnanswered(r.Node); err != nil {
		return err
	}
	// Judged as it will be stored: a plugin that did not answer its
	// probe keeps what it last answered.
	old, err := snap.NodeByID(nil, r.Node.ID)
	if err != nil {
		return err
	}
	n := r.Node.Copy()
	keepLastAnswers(old, n)
	if err := validateUnansweredUnderClaims(snap, old, n); err != nil {
		return err
	}
	if err := validateMachineIdentity(snap, n); err != nil {
		return err
	}
	return validateNodeUnderClaims(snap, n)
}

// validateRegistrar refuses a registration whose token (RegisteredBy)
// was deleted, or had expired at the registration's time (LastSeen, set
// by the server that took it and carried in the entry, so every replica
// judges alike), before it committed. The token was checked when the
// hello or the request arrived; a revocation committed between that
// check and this write is seen here, where the write is committed, and
// the node is not registered under a token that no longer holds.
// Snapshot rows are not held to it (validateNodeShape): a node whose
// registering token was deleted since stays registered.
func validateRegistrar(snap *Snapshot, n *structs.Node) error {
	if n.RegisteredBy == "" {
		return nil
	}
	tok, err := snap.ACLTokenByAccessor(nil, n.RegisteredBy)
	if err != nil {
		return err
	}
	switch {
	case tok == nil:
		return fmt.Errorf("node %q: the token that registered it (accessor %s) was revoked before the registration committed: %w",
			n.ID, n.RegisteredBy, structs.ErrPermissionDenied)
	case tok.Expired(n.LastSeen):
		return fmt.Errorf("node %q: the token that registered it (accessor %s) expired at %s, before the registration committed: %w",
			n.ID, n.RegisteredBy, tok.ExpirationTime.UTC().Format(time.RFC3339), structs.ErrPermissionDenied)
	}
	return nil
}

// validateOperatorFields refuses, when the request asks it
// (HoldOperatorFields), a registration that sets or replaces an
// operator's decision (structs.OperatorDecisionsReplaced) by a token, or
// an anonymous request, that lacks operator:write as the state stands at
// commit. The API and the node RPC refused it when the request arrived,
// but read the node and the policies before this write: a direct-mode
// registration by an operator, or a policy narrowed, committed in between
// was replaced or allowed by a node's own token.
func validateOperatorFields(snap *Snapshot, r *structs.NodeUpsertRequest) error {
	way, n := r.HoldOperatorFields, r.Node
	if !way.Valid() {
		return structs.Invalid("hold_operator_fields", "unknown registration way %q (want %q or %q)", way, structs.ThroughAPI, structs.ByItsAgent)
	}
	if way == "" {
		return nil
	}
	who, policies := "the token that registered it (accessor "+n.RegisteredBy+")", []string(nil)
	switch {
	case r.Anonymous:
		if n.RegisteredBy != "" {
			return structs.Invalid("anonymous", "a registration by token accessor %q cannot be anonymous", n.RegisteredBy)
		}
		who, policies = "the anonymous policy", []string{structs.AnonymousPolicy}
	case n.RegisteredBy == "":
		return nil // ACLs off: every caller is an operator
	default:
		tok, err := snap.ACLTokenByAccessor(nil, n.RegisteredBy)
		if err != nil || tok == nil {
			return err // a deleted token: validateRegistrar refused it
		}
		if tok.Management() {
			return nil
		}
		policies = tok.Policies
	}
	a, err := acl.Compile(policies, func(name string) (*structs.ACLPolicy, error) { return snap.ACLPolicyByName(nil, name) })
	if err != nil {
		return err
	}
	if a.Allowed(acl.OperatorWrite, "") {
		return nil
	}
	old, err := snap.NodeByID(nil, n.ID)
	if err != nil {
		return err
	}
	if reason := structs.OperatorDecisionsReplaced(way, old, n); reason != "" {
		return fmt.Errorf("node %q: %s, and %s lacks %s as the registration commits: %w",
			n.ID, reason, who, acl.OperatorWrite, structs.ErrPermissionDenied)
	}
	return nil
}

// validateNodeShape checks the node on its own (what a snapshot row must
// satisfy too).
func validateNodeShape(snap *Snapshot, r *structs.NodeUpsertRequest) error {
	n := r.Node
	if n == nil {
		return structs.Invalid("node", "is required")
	}
	if err := validID("node.id", n.ID); err != nil {
		return err
	}
	if !n.Status.Valid() {
		return structs.Invalid("node.status", "unknown status %q (want %q or %q)", n.Status, structs.NodeReady, structs.NodeDown)
	}
	keys := slices.Sorted(maps.Keys(n.Plugins))
	for _, k := range keys {
		np := n.Plugins[k]
		f := fmt.Sprintf("node.plugins[%s]", k)
		if err := validID(f, k); err != nil {
			return err
		}
		if np == nil {
			return structs.Invalid(f, "is null")
		}
		if np.PluginID != k {
			return structs.Invalid(f+".plugin_id", "is %q but must equal its key %q", np.PluginID, k)
		}
		if np.Endpoint != "" {
			if err := validEndpoint(f+".endpoint", np.Endpoint); err != nil {
				return err
			}
		}
		if np.MaxVolumes < 0 {
			return structs.Invalid(f+".max_volumes", "must not be negative")
		}
		if err := validateProbeError(f, np); err != nil {
			return err
		}
		_, err := mustExist(snap.PluginByID, "plugin", k)
		if err != nil {
			return err
		}
	}
	return nil
}

// validateMachineIdentity holds a node upsert (API registration, a node
// agent's hello, any other path) to the machine it names (structs.Machine).
//
// No two nodes may report one plugin's external node ID: staging paths and
// controller attachments belong to the machine, so one machine under two
// node IDs unstages and detaches under the other's workload, and an agent
// that reports another machine's ID redirects ControllerUnpublish there.
//
// A node that holds claims may not change the external node ID of their
// plugin, nor its root_dir: the claims' attachments are at the ID and their
// staging and target paths under the root they were published with, and
// the claims that follow would stage and attach elsewhere. Losing an
// endpoint (no ID reported) is not a change: releases use the ID recorded
// on each claim (structs.Claim.ReleaseNodeID).
func validateMachineIdentity(snap *Snapshot, n *structs.Node) error {
	for _, m := range n.Machines() {
		others, err := snap.NodesByMachine(nil, m)
		if err != nil {
			return err
		}
		for _, o := range others {
			if o.ID == n.ID {
				continue
			}
			return structs.Conflict("node %q: plugin %q reports external node ID %q, which node %q already reports: "+
				"one machine is one node. If it is the same machine under a new node ID, drain node %q and `volhost node deregister` it first; "+
				"otherwise the plugin endpoint (or node agent) of node %q reaches the wrong machine",
				n.ID, m.PluginID, m.ExternalNodeID, o.ID, o.ID, n.ID)
		}
	}
	old, err := snap.NodeByID(nil, n.ID)
	if err != nil || (old != nil && !machineMoved(old, n)) {
		return err
	}
	// With no node registered under the ID (deregistered, or collected,
	// while its claims' releases were not done) the claims recorded on it
	// are still on the machine they were published on: a machine that
	// takes the free ID is held to them as the node itself would be. Before,
	// only a registered node was: another machine registered under the
	// freed ID got the old claims' node steps (NodeUnstage of a staging
	// path under its own running allocation) and, on a single-node volume,
	// a second attachment.
	return heldClaimsOn(snap, n.ID, func(v *structs.Volume, c *structs.Claim) error {
		return validateHeldClaimMachine(old, n, v, c)
	})
}

// validateHeldClaimMachine refuses registration n of a node ID under
// which claim c of v is held when n is not the machine c was published
// on: another root_dir than its paths', or another external node ID for
// its plugin than the one it was attached to. old is the node registered
// under the ID now, nil when none is.
func validateHeldClaimMachine(old, n *structs.Node, v *structs.Volume, c *structs.Claim) error {
	name := volName(v.Namespace, v.ID)
	published := c.StagingPath != "" || c.TargetPath != ""
	if old == nil {
		for _, p := range []string{c.StagingPath, c.TargetPath} {
			if p != "" && (n.RootDir == "" || !structs.WithinRoot(n.RootDir, p)) {
				return structs.Conflict("node %q: the claim of allocation %q on volume %q is still held on this node ID, published at %q, outside root_dir %q: "+
					"a node registered under the ID of one whose claims are held must be the same machine: register another machine under another node ID, "+
					"or let those claims be released (or force-deregister the volume) first", n.ID, c.AllocID, name, p, n.RootDir)
			}
		}
	} else if old.RootDir != n.RootDir && published {
		return structs.Conflict("node %q holds the claim of allocation %q on volume %q, published under root_dir %q: "+
			"its root_dir cannot change to %q while it holds claims: %s",
			n.ID, c.AllocID, name, old.RootDir, n.RootDir, drainFirst)
	}
	var was, now string
	if old != nil {
		if np := old.Plugins[v.PluginID]; np != nil {
			was = np.ExternalNodeID
		}
	}
	if np := n.Plugins[v.PluginID]; np != nil {
		now = np.ExternalNodeID
	}
	rec := c.ReleaseNodeID(was)
	if old == nil && rec == "" && published {
		// Nothing says which machine holds its mounts: the same node ID
		// is no proof (another machine under it got the claim's node
		// steps, and a new claim published from a path never staged there).
		return structs.Conflict("node %q: the claim of allocation %q on volume %q is still held on this node ID, published at %q with no external node ID recorded: "+
			"which machine holds it is unknown, so the node ID cannot be registered again until that claim is released "+
			"(or the volume force-deregistered)", n.ID, c.AllocID, name, cmp.Or(c.StagingPath, c.TargetPath))
	}
	if rec == "" || now == "" || now == rec {
		return nil
	}
	if old == nil {
		return structs.Conflict("node %q: the claim of allocation %q on volume %q is still held on this node ID, attached to plugin %q's external node ID %q: "+
			"a machine that reports external node ID %q cannot take the node ID: register it under another node ID, "+
			"or let those claims be released (or force-deregister the volume) first", n.ID, c.AllocID, name, v.PluginID, rec, now)
	}
	return structs.Conflict("node %q holds the claim of allocation %q on volume %q, attached to plugin %q's external node ID %q: "+
		"the node cannot report external node ID %q while it holds claims of that plugin: %s",
		n.ID, c.AllocID, name, v.PluginID, rec, now, drainFirst)
}

// machineMoved: n reports another root_dir than old, or another
// non-empty external node ID for one of old's plugins.
func machineMoved(old, n *structs.Node) bool {
	if old.RootDir != n.RootDir {
		return true
	}
	for id, np := range n.Plugins {
		if np == nil || np.ExternalNodeID == "" {
			continue
		}
		// A plugin old did not report, or reported with no ID, may hold
		// claims recorded with an ID from an earlier registration.
		if op := old.Plugins[id]; op == nil || op.ExternalNodeID != np.ExternalNodeID {
			return true
		}
	}
	return false
}

func validateNodeStatus(snap *Snapshot, r *structs.NodeStatusUpdateRequest) error {
	if err := validID("node_id", r.NodeID); err != nil {
		return err
	}
	if r.Status != structs.NodeReady && r.Status != structs.NodeDown {
		// gone is decided by the heartbeat tracker (node_gc_threshold), or
		// is a node removed with `node deregister`.
		return structs.Invalid("status", "unknown status %q (want %q or %q)", r.Status, structs.NodeReady, structs.NodeDown)
	}
	_, err := mustExist(snap.NodeByID, "node", r.NodeID)
	if err != nil {
		return err
	}
	return nil
}

func validateNodeDeregister(snap *Snapshot, r *structs.NodeDeregisterRequest) error {
	if err := validID("node_id", r.NodeID); err != nil {
		return err
	}
	_, err := mustExist(snap.NodeByID, "node", r.NodeID)
	if err != nil {
		return err
	}
	// A claim's alloc always runs on the claim's node (checked at claim), so
	// "no live alloc here" also means "no live claim here". Claims of
	// terminal allocs may stay only when forced (below).
	allocs, err := snap.AllocsByNode(nil, r.NodeID)
	if err != nil {
		return err
	}
	var live []string
	for _, a := range allocs {
		if !a.ClientStatus.Terminal() {
			live = append(live, a.ID)
		}
	}
	if len(live) > 0 {
		return structs.Conflict("node %q has live allocation(s): %s; they must end first", r.NodeID, list(live))
	}
	// Claims of ended allocations still on the node: once the node is
	// gone their node steps are skipped (hashicorp/nomad#12346), which unmounts
	// nothing, so the operator says so with force.
	claims, err := nodeClaims(snap, r.NodeID)
	if err != nil {
		return err
	}
	if len(claims) > 0 && !r.Force {
		ids := make([]string, len(claims))
		for i, c := range claims {
			ids[i] = fmt.Sprintf("%s (alloc %s, %s)", volName(c.Namespace, c.VolumeID), c.AllocID, c.State)
		}
		return structs.Conflict("node %q still has %d claim(s) to release: %s; wait for their release, "+
			"or force: their node steps are then skipped, safe only if the node is off", r.NodeID, len(claims), list(ids))
	}
	return nil
}

func validateVolumeRegister(snap *Snapshot, r *structs.VolumeRegisterRequest) error {
	if err := validateVolumeShapes(snap, r); err != nil {
		return err
	}
	return validateOneVolumePerDisk(snap, r.Volumes)
}

// validateOneVolumePerDisk refuses a volume whose plugin and external ID
// another volume already has, in the store or earlier in the request: two
// volumes on one disk let two single-node-writer claims attach it to two
// nodes, and releasing one detaches the disk under the other. A
// re-registration of the same volume is an update, not a second volume.
func validateOneVolumePerDisk(snap *Snapshot, vols []*structs.Volume) error {
	seen := make(map[[2]string]string, len(vols))
	for i, v := range vols {
		key := volName(v.Namespace, v.ID)
		disk := [2]string{v.PluginID, v.ExternalID}
		if other, ok := seen[disk]; ok {
			return structs.Invalid(fmt.Sprintf("volumes[%d].external_id", i), "volume %q has plugin %q and external ID %q like volume %q earlier in the request: one disk, one volume", key, v.PluginID, v.ExternalID, other)
		}
		seen[disk] = key
		existing, err := snap.VolumesByExternalID(nil, v.PluginID, v.ExternalID)
		if err != nil {
			return err
		}
		for _, o := range existing {
			if o.Namespace == v.Namespace && o.ID == v.ID {
				continue
			}
			if o.Namespace != v.Namespace {
				// Not named: a token that may register in one namespace
				// would learn another's volume IDs by trying disks.
				return structs.Conflict("volume %q: plugin %q external ID %q is already registered as a volume of another namespace; one disk, one volume: its operator must deregister it first", key, v.PluginID, v.ExternalID)
			}
			return structs.Conflict("volume %q: plugin %q external ID %q is already registered as volume %q; one disk, one volume: deregister %q first, or register the disk once", key, v.PluginID, v.ExternalID, volName(o.Namespace, o.ID), volName(o.Namespace, o.ID))
		}
	}
	return nil
}

// validateVolumeShapes checks each volume of a registration on its own and
// against its earlier registration.
func validateVolumeShapes(snap *Snapshot, r *structs.VolumeRegisterRequest) error {
	seen := make(map[string]bool, len(r.Volumes))
	return entries("volumes", "volume", r.Volumes, func(f string, v *structs.Volume) error {
		if err := validVolumeShape(snap, f, v); err != nil {
			return err
		}
		key := volName(v.Namespace, v.ID)
		if seen[key] {
			return structs.Invalid(f+".id", "volume %q appears twice in the request", key)
		}
		seen[key] = true
		if len(v.Claims) > 0 {
			return structs.Invalid(f+".claims", "cannot be set on registration; claim the volume instead")
		}
		if v.Stuck != nil {
			return structs.Invalid(f+".stuck", "cannot be set on registration")
		}
		old, err := snap.VolumeByID(nil, v.Namespace, v.ID)
		if err != nil {
			return err
		}
		if old != nil && len(old.Claims) > 0 {
			var changed []string
			if old.PluginID != v.PluginID {
				changed = append(changed, "plugin_id")
			}
			if old.ExternalID != v.ExternalID {
				changed = append(changed, "external_id")
			}
			if old.AccessMode != v.AccessMode {
				changed = append(changed, "access_mode")
			}
			if old.AttachmentMode != v.AttachmentMode {
				changed = append(changed, "attachment_mode")
			}
			if len(changed) > 0 {
				return structs.Conflict("volume %q has claims: %s cannot change while claimed", key, strings.Join(changed, ", "))
			}
		}
		return nil
	})
}

// validVolumeShape checks a volume's own fields and that its plugin exists:
// what every registered volume and every snapshot's volume row satisfy (a
// row's claims and stuck mark come from later writes and are checked by
// validateVolumeRow). f names the volume in errors.
func validVolumeShape(snap *Snapshot, f string, v *structs.Volume) error {
	if err := validIDIn(f, ".namespace", v.Namespace); err != nil {
		return err
	}
	if err := validIDIn(f, ".id", v.ID); err != nil {
		return err
	}
	if v.ExternalID == "" {
		return structs.Invalid(f+".external_id", "must not be empty")
	}
	if err := validVolumeSizes(f, v); err != nil {
		return err
	}
	if err := validIDIn(f, ".plugin_id", v.PluginID); err != nil {
		return err
	}
	if !v.AccessMode.Valid() {
		return structs.Invalid(f+".access_mode", "must be one of %s, got %q", structs.Choices(structs.AccessModes...), v.AccessMode)
	}
	if !v.AttachmentMode.Valid() {
		return structs.Invalid(f+".attachment_mode", "must be one of %s, got %q", structs.Choices(structs.AttachmentModes...), v.AttachmentMode)
	}
	_, err := mustExist(snap.PluginByID, "plugin", v.PluginID)
	return err
}

// volumesField names volume i of a registration in errors; the first
// without formatting (a restore checks its volumes one at a time, a
// million of them).
func volumesField(i int) string {
	if i == 0 {
		return "volumes[0]"
	}
	return fmt.Sprintf("volumes[%d]", i)
}

func validateVolumeDeregister(snap *Snapshot, r *structs.VolumeDeregisterRequest) error {
	if err := validID("namespace", r.Namespace); err != nil {
		return err
	}
	if err := validID("volume_id", r.VolumeID); err != nil {
		return err
	}
	v, err := snap.VolumeByID(nil, r.Namespace, r.VolumeID)
	if err != nil {
		return err
	}
	if v == nil {
		return structs.NotFound("volume", volName(r.Namespace, r.VolumeID))
	}
	if len(v.Claims) == 0 {
		return nil
	}
	claimants := make([]string, 0, len(v.Claims))
	for id := range v.Claims {
		claimants = append(claimants, id)
	}
	if !r.Force {
		return structs.Conflict("volume %q is in use by allocation(s) %s; wait for the release or deregister with force",
			volName(r.Namespace, r.VolumeID), list(claimants))
	}
	live, err := snap.liveAllocs(claimants)
	if err != nil {
		return err
	}
	if len(live) > 0 {
		return structs.Conflict("volume %q has live allocation(s) %s; force deregistration needs every allocation terminal or gone",
			volName(r.Namespace, r.VolumeID), list(live))
	}
	return nil
}

// liveAllocs returns the IDs among ids whose allocation exists and is not
// terminal.
func (snap *Snapshot) liveAllocs(ids []string) ([]string, error) {
	var live []string
	for _, id := range ids {
		a, err := snap.AllocByID(nil, id)
		if err != nil {
			return nil, err
		}
		if a != nil && !a.ClientStatus.Terminal() {
			live = append(live, id)
		}
	}
	return live, nil
}

func validateAllocUpsert(snap *Snapshot, r *structs.AllocUpsertRequest) error {
	seen := make(map[string]bool, len(r.Allocs))
	return entries("allocs", "allocation", r.Allocs, func(f string, a *structs.Alloc) error {
		if err := validID(f+".id", a.ID); err != nil {
			return err
		}
		if seen[a.ID] {
			return structs.Invalid(f+".id", "allocation %q appears twice in the request", a.ID)
		}
		seen[a.ID] = true
		if a.Namespace != "" {
			if err := validID(f+".namespace", a.Namespace); err != nil {
				return err
			}
		}
		if err := validID(f+".node_id", a.NodeID); err != nil {
			return err
		}
		if !a.ClientStatus.Valid() {
			return structs.Invalid(f+".client_status", "must be one of %s, got %q", structs.Choices(structs.AllocClientStatuses...), a.ClientStatus)
		}
		old, err := snap.AllocByID(nil, a.ID)
		if err != nil {
			return err
		}
		if old != nil {
			if old.NodeID != a.NodeID {
				return structs.Invalid(f+".node_id", "allocation %q runs on node %q and cannot move to %q", a.ID, old.NodeID, a.NodeID)
			}
			// Its claims were checked against the namespace it had: a
			// move would leave them in a namespace it no longer is in.
			if r.KeepNamespace && old.Namespace != a.Namespace {
				return structs.Invalid(f+".namespace", "allocation %q is in namespace %q and cannot move to %q", a.ID, old.Namespace, a.Namespace)
			}
			// Terminal is for good: a released claim must never find its
			// allocation running again (RATIONALE.md "Safety": never release under a
			// running allocation).
			if old.ClientStatus.Terminal() && !a.ClientStatus.Terminal() {
				return structs.Conflict("allocation %q is %s, a terminal status; it cannot become %s", a.ID, old.ClientStatus, a.ClientStatus)
			}
			return nil // its node may have been deregistered since
		}
		// Gone is for good too while a claim still names the
		// allocation: it ended before it was deleted (a live one's claim
		// is never released), its claim may be half released, and the
		// claim path would answer the claim taken to an allocation
		// running again with its target already unpublished.
		if !a.ClientStatus.Terminal() {
			vols, err := snap.VolumesClaimedByAlloc(nil, a.ID)
			if err != nil {
				return err
			}
			if len(vols) > 0 {
				return structs.Conflict("allocation %q was deleted while its claim on volume %q is being released; it cannot come back as %s (use a new allocation ID)",
					a.ID, volName(vols[0].Namespace, vols[0].ID), a.ClientStatus)
			}
		}
		_, err = mustExist(snap.NodeByID, "node", a.NodeID)
		return err
	})
}

func validateAllocDelete(snap *Snapshot, r *structs.AllocDeleteRequest) error {
	if len(r.AllocIDs) == 0 {
		return structs.Invalid("alloc_ids", "at least one allocation ID is required")
	}
	seen := make(map[string]bool, len(r.AllocIDs))
	for i, id := range r.AllocIDs {
		f := fmt.Sprintf("alloc_ids[%d]", i)
		if err := validID(f, id); err != nil {
			return err
		}
		if seen[id] {
			return structs.Invalid(f, "allocation %q appears twice in the request", id)
		}
		seen[id] = true
		a, err := mustExist(snap.AllocByID, "allocation", id)
		if err != nil {
			return err
		}
		// A gone allocation counts as done for release, so deleting a live
		// one would let its claims be released under it.
		if !a.ClientStatus.Terminal() {
			return structs.Conflict("allocation %q is %s; only terminal allocations can be deleted", id, a.ClientStatus)
		}
	}
	return nil
}

func validateVolumeRef(prefix, ns, id string) error {
	if err := validID(prefix+"namespace", ns); err != nil {
		return err
	}
	return validID(prefix+"volume_id", id)
}

// volumeFor reads the named volume, NotFound when missing.
func (snap *Snapshot) volumeFor(ns, id string) (*structs.Volume, error) {
	v, err := snap.VolumeByID(nil, ns, id)
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, structs.NotFound("volume", volName(ns, id))
	}
	return v, nil
}

func validateClaim(snap *Snapshot, r *structs.VolumeClaimRequest) error {
	if err := validateVolumeRef("", r.Namespace, r.VolumeID); err != nil {
		return err
	}
	c := r.Claim
	if c == nil {
		return structs.Invalid("claim", "is required")
	}
	if err := validID("claim.alloc_id", c.AllocID); err != nil {
		return err
	}
	if err := validID("claim.node_id", c.NodeID); err != nil {
		return err
	}
	if !c.Mode.Valid() {
		return structs.Invalid("claim.mode", "unknown claim mode %q (want %q or %q)", c.Mode, structs.ClaimRead, structs.ClaimWrite)
	}
	if c.State != "" && c.State != structs.ClaimTaken && c.State != structs.ClaimPublishing {
		return structs.Invalid("claim.state", "a claim is written %q (before its first CSI call) or %q, not %q",
			structs.ClaimPublishing, structs.ClaimTaken, c.State)
	}
	if c.Attempts < 0 {
		return structs.Invalid("claim.attempts", "must not be negative")
	}
	if err := validateNewClaimMarks(c); err != nil {
		return err
	}
	v, err := snap.volumeFor(r.Namespace, r.VolumeID)
	if err != nil {
		return err
	}
	name := volName(v.Namespace, v.ID)
	if c.AccessMode != "" && c.AccessMode != v.AccessMode {
		return structs.Invalid("claim.access_mode", "%q does not match volume %q access mode %q", c.AccessMode, name, v.AccessMode)
	}
	if c.AttachmentMode != "" && c.AttachmentMode != v.AttachmentMode {
		return structs.Invalid("claim.attachment_mode", "%q does not match volume %q attachment mode %q", c.AttachmentMode, name, v.AttachmentMode)
	}
	if c.NodeUnpublished {
		return validateUnstageInDoubtMark(v, c)
	}
	resume := false
	if old := v.Claims[c.AllocID]; old != nil && old.State == structs.ClaimPublishing {
		if err := validateClaimOverPublishing(v, old, c); err != nil || c.State == structs.ClaimTaken {
			return err
		}
		resume = true // checked below like a new claim, but it is counted already
	}
	if c.Mode == structs.ClaimWrite && v.AccessMode.MaxWriters() == 0 {
		return structs.Invalid("claim.mode", "volume %q is %s: write claims are not allowed", name, v.AccessMode)
	}
	a, err := claimAlloc(snap, v, c.AllocID)
	if err != nil {
		return err
	}
	if a.NodeID != c.NodeID {
		return structs.Invalid("claim.node_id", "allocation %q runs on node %q, not %q", a.ID, a.NodeID, c.NodeID)
	}
	n, err := mustExist(snap.NodeByID, "node", c.NodeID)
	if err != nil {
		return err
	}
	if a.ClientStatus.Terminal() {
		return structs.Conflict("allocation %q is %s and cannot claim a volume", a.ID, a.ClientStatus)
	}
	if n.Status != structs.NodeReady {
		return structs.Conflict("node %q is %s and cannot take a claim", n.ID, n.Status)
	}
	if n.Fence != nil {
		// Fenced, heartbeating: attested off, so nothing may be published
		// there until an operator unfences it.
		return structs.Conflict("node %q is fenced (%s: %s) and cannot take a claim until `volhost node unfence`", n.ID, n.Fence.Source, n.Fence.Reason)
	}
	if np := n.Plugins[v.PluginID]; np != nil && !np.Answering() {
		// Its node steps would fail, after an attachment made for them;
		// checked at the claim path's start and again at the write-ahead
		// record's commit (the plugin may stop answering in between).
		return structs.Conflict("node %q's plugin %q did not answer its node agent's last probe (%s): claims there wait until it answers "+
			"(the agent probes it again every few seconds and registers the node again when it does); retry then, or claim on another node",
			n.ID, v.PluginID, np.ProbeError)
	}
	if v.Stuck != nil {
		return structs.Conflict("volume %q is stuck: %s", name, v.Stuck.Reason)
	}
	// The machine checks hold for a new claim and for a retry taking up a
	// record (resume), at the claim path's check and at the write-ahead
	// record's commit, before any CSI call. A confirmation returned above:
	// between its record and its confirmation the claim path holds the
	// volume's lock, so no release step of the volume ran on this leader,
	// and another leader's are term-fenced.
	if err := validateClaimMachine(v, n, c); err != nil {
		return err
	}
	if err := validateClaimLeftovers(snap, v, n, c); err != nil {
		return err
	}
	if resume {
		return nil
	}
	if _, dup := v.Claims[c.AllocID]; dup {
		return structs.Conflict("allocation %q already holds a claim on volume %q", c.AllocID, name)
	}
	// A claim counts until ready-to-free, so a new writer never races the
	// controller detach of the previous one (hashicorp/nomad#8609).
	if c.Mode == structs.ClaimWrite {
		if max := v.AccessMode.MaxWriters(); max >= 0 {
			if w := v.Allocs(structs.ClaimWrite); len(w) >= max {
				return structs.Conflict("volume %q is %s and allocation(s) %s hold its write claim until it reaches %s",
					name, v.AccessMode, list(w), structs.ClaimReadyToFree)
			}
		}
	}
	if v.AccessMode.SingleNode() {
		for id, other := range v.Claims {
			if other.State != structs.ClaimReadyToFree && other.NodeID != c.NodeID {
				return structs.Conflict("volume %q is %s and allocation %q holds it on node %q", name, v.AccessMode, id, other.NodeID)
			}
		}
	}
	return nil
}

// claimAlloc is the allocation a claim of v names, which must be in v's
// namespace. One of another namespace is refused exactly as one that does
// not exist, before anything else about it is looked at, and the refusal
// names only the claimant's own namespace: a token that may claim in v's
// namespace was told, of an allocation of a namespace it may not read,
// that the ID exists, where it runs ("runs on node n1, not n9") and whose
// it is ("is in namespace prod"), which GET /v1/alloc/ID refuses to show
// it. A refusal of a field of the body (400 on claim.alloc_id), not a 404:
// the path's volume exists, and a scheduler reading the answer must not
// take it for a missing volume. The same claims are refused as before (a
// replay decides alike). An allocation without a namespace (written
// before namespaces were kept) is taken as in any, as before.
func claimAlloc(snap *Snapshot, v *structs.Volume, allocID string) (*structs.Alloc, error) {
	a, err := snap.AllocByID(nil, allocID)
	if err != nil {
		return nil, err
	}
	if a == nil || (a.Namespace != "" && a.Namespace != v.Namespace) {
		return nil, structs.Invalid("claim.alloc_id", "allocation %q does not exist in namespace %q", allocID, v.Namespace)
	}
	return a, nil
}

func validateClaimRemove(snap *Snapshot, r *structs.VolumeClaimRemoveRequest) error {
	if err := validateVolumeRef("", r.Namespace, r.VolumeID); err != nil {
		return err
	}
	if err := validID("alloc_id", r.AllocID); err != nil {
		return err
	}
	v, err := snap.volumeFor(r.Namespace, r.VolumeID)
	if err != nil {
		return err
	}
	c, ok := v.Claims[r.AllocID]
	if !ok {
		return structs.NotFound("claim", volName(r.Namespace, r.VolumeID)+"/"+r.AllocID)
	}
	return validateRemovePublishing(v, c, r)
}

func validateCheckpoint(snap *Snapshot, r *structs.ClaimCheckpointRequest) error {
	if err := validateVolumeRef("", r.Namespace, r.VolumeID); err != nil {
		return err
	}
	c := r.Claim
	if c == nil {
		return structs.Invalid("claim", "is required")
	}
	if err := validID("claim.alloc_id", c.AllocID); err != nil {
		return err
	}
	if !c.State.Valid() {
		return structs.Invalid("claim.state", "unknown claim state %q", c.State)
	}
	if c.Attempts < 0 {
		return structs.Invalid("claim.attempts", "must not be negative")
	}
	if r.Free && c.State != structs.ClaimControllerDetached {
		return structs.Invalid("free", "frees only a claim checkpointed at %s, not %s", structs.ClaimControllerDetached, c.State)
	}
	v, err := snap.volumeFor(r.Namespace, r.VolumeID)
	if err != nil {
		return err
	}
	old, ok := v.Claims[c.AllocID]
	if !ok {
		return structs.NotFound("claim", volName(r.Namespace, r.VolumeID)+"/"+c.AllocID)
	}
	if c.NodeID != old.NodeID {
		return structs.Invalid("claim.node_id", "is %q but the claim is on node %q", c.NodeID, old.NodeID)
	}
	if c.Mode != old.Mode {
		return structs.Invalid("claim.mode", "is %q but the claim was taken as %q", c.Mode, old.Mode)
	}
	if c.State.Order() < old.State.Order() {
		return structs.Conflict("claim of allocation %q on volume %q cannot move back from %s to %s",
			c.AllocID, volName(r.Namespace, r.VolumeID), old.State, c.State)
	}
	if (c.State == structs.ClaimPublishing || old.State == structs.ClaimPublishing) && c.State.Order() == old.State.Order() && c.State != old.State {
		// Only the claim path confirms its own publish (VolumeClaimType):
		// a release never writes a publishing claim taken, nor back.
		return structs.Conflict("claim of allocation %q on volume %q cannot move from %s to %s by a release checkpoint",
			c.AllocID, volName(r.Namespace, r.VolumeID), old.State, c.State)
	}
	// A transition that ran a per-(volume, machine) step on the ground
	// that no other claim on the machine needed it is refused if a
	// committed claim says otherwise (a release pass racing a new claim on
	// the same node), with the rules
	// the release decided by (structs.Volume.NeedsStaging, HoldsAttachment).
	if r.Unstaged {
		if o := v.NeedsStaging(old); o != nil {
			return structs.Conflict("claim of allocation %q on volume %q reports NodeUnstage on node %q, where allocation %q (node %q) is published from the staging path",
				c.AllocID, volName(r.Namespace, r.VolumeID), c.NodeID, o.AllocID, o.NodeID)
		}
	}
	if r.ControllerUnpublished {
		if o := v.HoldsAttachment(old); o != nil {
			return structs.Conflict("claim of allocation %q on volume %q reports ControllerUnpublish on node %q, where allocation %q (node %q) still uses the attachment (%s)",
				c.AllocID, volName(r.Namespace, r.VolumeID), c.NodeID, o.AllocID, o.NodeID, o.State)
		}
	}
	if err := validateNodeUnpublished(old, c, r); err != nil {
		return err
	}
	if c.State.Order() > old.State.Order() || (c.NodeUnpublished && !old.NodeUnpublished) || r.Free {
		// The host's safety invariant, enforced at the store too: never
		// release a claim whose allocation still runs,
		// nor record that its target was unpublished.
		live, err := snap.liveAllocs([]string{c.AllocID})
		if err != nil {
			return err
		}
		if len(live) > 0 {
			a, _ := snap.AllocByID(nil, c.AllocID)
			return structs.Conflict("allocation %q is %s: its claim on volume %q cannot move to %s",
				c.AllocID, a.ClientStatus, volName(r.Namespace, r.VolumeID), c.State)
		}
	}
	return nil
}

// validateNodeUnpublished checks the claim's NodeUnpublished mark (exactly
// one NodeUnpublish per claim): it is set only on a taken claim that has a target path to
// unpublish, and never cleared, so a checkpoint from a copy read before it
// was set cannot make the next attempt repeat NodeUnpublishVolume.
func validateNodeUnpublished(old, c *structs.Claim, r *structs.ClaimCheckpointRequest) error {
	name := volName(r.Namespace, r.VolumeID)
	switch {
	case old.NodeUnpublished && !c.NodeUnpublished:
		return structs.Conflict("claim of allocation %q on volume %q cannot clear node_unpublished: NodeUnpublish already succeeded",
			c.AllocID, name)
	case !c.NodeUnpublished || old.NodeUnpublished:
		return nil
	case c.State != structs.ClaimTaken && c.State != structs.ClaimPublishing:
		return structs.Invalid("claim.node_unpublished", "is set only on a %s or %s claim (NodeUnstage next), not on one moving to %s",
			structs.ClaimPublishing, structs.ClaimTaken, c.State)
	case old.TargetPath == "" || c.TargetPath != old.TargetPath:
		return structs.Invalid("claim.node_unpublished", "claim of allocation %q on volume %q has no target path %q to unpublish",
			c.AllocID, name, c.TargetPath)
	}
	return nil
}

func validateStuck(snap *Snapshot, r *structs.VolumeStuckRequest) error {
	if err := validateVolumeRef("", r.Namespace, r.VolumeID); err != nil {
		return err
	}
	if r.Stuck != nil && r.Stuck.Reason == "" {
		return structs.Invalid("stuck.reason", "must not be empty")
	}
	_, err := snap.volumeFor(r.Namespace, r.VolumeID)
	return err
}

func validateGC(_ *Snapshot, r *structs.ClaimGCRequest) error {
	if len(r.Volumes) == 0 {
		return structs.Invalid("volumes", "at least one volume is required")
	}
	for i, ref := range r.Volumes {
		if err := validateVolumeRef(fmt.Sprintf("volumes[%d].", i), ref.Namespace, ref.ID); err != nil {
			return err
		}
	}
	// Volumes deregistered since the GC looked are skipped at apply, not
	// refused: the GC claim is only a wake-up.
	return nil
}

func validateLeftoversClear(snap *Snapshot, r *structs.LeftoversClearRequest) error {
	if r.All {
		if len(r.IDs) > 0 {
			return structs.Invalid("all", "cannot be combined with ids")
		}
		return nil
	}
	if len(r.IDs) == 0 {
		return structs.Invalid("ids", "name the leftovers to clear, or set all")
	}
	for i, id := range r.IDs {
		if id == "" {
			return structs.Invalid(fmt.Sprintf("ids[%d]", i), "must not be empty")
		}
		l, err := first[*structs.Leftover](snap, nil, TableLeftovers, indexID, id)
		if err != nil {
			return err
		}
		if l == nil {
			return structs.NotFound("leftover", id)
		}
	}
	return nil
}

func validateEvents(_ *Snapshot, r *structs.EventAppendRequest) error {
	return entries("events", "event", r.Events, func(f string, e *structs.Event) error {
		if e.Type == "" {
			return structs.Invalid(f+".type", "must not be empty")
		}
		return nil
	})
}

// mustExist returns the object get finds by id, or a NotFound error naming
// what is missing.
func mustExist[T any](get func(memdb.WatchSet, string) (*T, error), what, id string) (*T, error) {
	obj, err := get(nil, id)
	if err == nil && obj == nil {
		err = structs.NotFound(what, id)
	}
	return obj, err
}
