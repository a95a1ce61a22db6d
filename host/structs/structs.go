// Package structs holds volhost's domain types: volumes and their claims,
// allocations, nodes, CSI plugins, events and leftovers, plus the typed
// requests that travel through the replicated log.
//
// It holds data and pure methods only, so every layer (cmd, host, watcher)
// may import it without pulling in anything else.
package structs

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// ClaimMode says whether an allocation reads or writes a volume.
type ClaimMode string

const (
	ClaimRead  ClaimMode = "read"
	ClaimWrite ClaimMode = "write"
)

// Valid reports whether m is a known claim mode.
func (m ClaimMode) Valid() bool { return m == ClaimRead || m == ClaimWrite }

// AccessMode is the CSI VolumeCapability.AccessMode of a volume or claim.
type AccessMode string

const (
	AccessSingleNodeReader     AccessMode = "single-node-reader-only"
	AccessSingleNodeWriter     AccessMode = "single-node-writer"
	AccessMultiNodeReader      AccessMode = "multi-node-reader-only"
	AccessMultiNodeSingleWrite AccessMode = "multi-node-single-writer"
	AccessMultiNodeMultiWrite  AccessMode = "multi-node-multi-writer"
)

// AccessModes lists every access mode, for the messages that name them.
var AccessModes = []AccessMode{AccessSingleNodeReader, AccessSingleNodeWriter, AccessMultiNodeReader,
	AccessMultiNodeSingleWrite, AccessMultiNodeMultiWrite}

// Valid reports whether a is a known access mode.
func (a AccessMode) Valid() bool { return slices.Contains(AccessModes, a) }

// MaxWriters is how many write claims the access mode allows at once
// (-1: unbounded).
func (a AccessMode) MaxWriters() int {
	switch a {
	case AccessSingleNodeReader, AccessMultiNodeReader:
		return 0
	case AccessSingleNodeWriter, AccessMultiNodeSingleWrite:
		return 1
	}
	return -1
}

// SingleNode reports whether all claims must be on one node.
func (a AccessMode) SingleNode() bool {
	return a == AccessSingleNodeReader || a == AccessSingleNodeWriter
}

// AttachmentMode is how a volume is presented: a filesystem or a raw block device.
type AttachmentMode string

const (
	AttachFilesystem  AttachmentMode = "file-system"
	AttachBlockDevice AttachmentMode = "block-device"
)

// AttachmentModes lists every attachment mode, for the messages that name them.
var AttachmentModes = []AttachmentMode{AttachFilesystem, AttachBlockDevice}

// Valid reports whether m is a known attachment mode.
func (m AttachmentMode) Valid() bool { return m == AttachFilesystem || m == AttachBlockDevice }

// ClaimState is a claim's position in its lifecycle:
// publishing → taken → node-detached → controller-detached → ready-to-free
// → (removed). A publishing claim that never reaches taken is either
// removed by the claim path that wrote it (every publish step undone) or
// released by the watcher like any claim (publishing → node-detached ...).
type ClaimState string

const (
	// ClaimPublishing is the write-ahead record of a claim whose publish
	// calls may have run: it is committed before the first CSI call, so
	// a leader that dies mid-publish, or a refused claim whose rollback
	// stopped, leaves a claim that accounts for what may be attached,
	// staged or published (structs.Claim.Staged and friends: unknown).
	ClaimPublishing         ClaimState = "publishing"
	ClaimTaken              ClaimState = "taken"
	ClaimNodeDetached       ClaimState = "node-detached"
	ClaimControllerDetached ClaimState = "controller-detached"
	ClaimReadyToFree        ClaimState = "ready-to-free"
)

// Valid reports whether s is a known claim state.
func (s ClaimState) Valid() bool {
	switch s {
	case ClaimPublishing, ClaimTaken, ClaimNodeDetached, ClaimControllerDetached, ClaimReadyToFree:
		return true
	}
	return false
}

// ClaimStates lists every claim state in lifecycle order, for the
// messages, filters and counters that name them.
var ClaimStates = []ClaimState{ClaimPublishing, ClaimTaken, ClaimNodeDetached, ClaimControllerDetached, ClaimReadyToFree}

// Order gives the state's rank so transitions can be checked to move forward only.
// Publishing and taken share a rank: both are before the node steps, and
// only the claim path moves a claim from one to the other (host/state).
func (s ClaimState) Order() int {
	switch s {
	case ClaimPublishing, ClaimTaken:
		return 0
	case ClaimNodeDetached:
		return 1
	case ClaimControllerDetached:
		return 2
	case ClaimReadyToFree:
		return 3
	}
	return -1
}

// ErrorKind classifies a claim's last error.
type ErrorKind string

const (
	ErrorCSI          ErrorKind = "csi"          // the driver answered with a gRPC error
	ErrorModule       ErrorKind = "module"       // a Wasm module faulted or broke the safety rules
	ErrorPrecondition ErrorKind = "precondition" // something the host needs is missing (endpoint, node ID)
)

// ClaimError is the last error a claim's release hit. The gRPC code is kept
// as a number so callers branch on it, never on the message (the
// reference system matches error strings across RPC).
type ClaimError struct {
	Kind          ErrorKind `json:"kind"`
	Step          string    `json:"step,omitempty"` // node-unpublish, node-unstage, controller-unpublish, policy, adapter
	Code          uint32    `json:"code"`           // google.golang.org/grpc/codes.Code; 0 when not a CSI error
	CodeName      string    `json:"code_name,omitempty"`
	Message       string    `json:"message"`
	Module        string    `json:"module,omitempty"`
	ModuleVersion string    `json:"module_version,omitempty"`
	Fault         string    `json:"fault,omitempty"` // trap, timeout, oom, abi, bad-output, open-circuit, unsafe
	Fatal         bool      `json:"fatal,omitempty"` // classified fatal: retrying will not help
	// Resent records that the release sent the step again after this
	// answer and has no answer to the new call yet: a leader that dies or
	// steps down while it runs writes nothing after it, so the answer
	// here no longer says the driver is done (Claim.UnstageInDoubt,
	// DetachInDoubt).
	Resent bool      `json:"resent,omitempty"`
	Time   time.Time `json:"time"`
}

func (e *ClaimError) Error() string {
	if e == nil {
		return ""
	}
	switch e.Kind {
	case ErrorCSI:
		if e.Resent {
			return fmt.Sprintf("%s: %s: %s (sent again since: no answer yet)", e.Step, e.CodeName, e.Message)
		}
		return fmt.Sprintf("%s: %s: %s", e.Step, e.CodeName, e.Message)
	case ErrorModule:
		return fmt.Sprintf("module %s@%s %s: %s", e.Module, e.ModuleVersion, e.Fault, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Step, e.Message)
}

// Claim binds an allocation to a volume on a node and carries its release
// progress. It is checkpointed whole at every transition.
type Claim struct {
	AllocID        string            `json:"alloc_id"`
	NodeID         string            `json:"node_id"`
	Mode           ClaimMode         `json:"mode"`
	AccessMode     AccessMode        `json:"access_mode"`
	AttachmentMode AttachmentMode    `json:"attachment_mode"`
	State          ClaimState        `json:"state"`
	ExternalNodeID string            `json:"external_node_id,omitempty"`
	PublishContext map[string]string `json:"publish_context,omitempty"`
	StagingPath    string            `json:"staging_path,omitempty"`
	TargetPath     string            `json:"target_path,omitempty"`
	// Unattached records that the claim's publish made no controller
	// attachment (its plugin had no PUBLISH_UNPUBLISH_VOLUME then): its
	// release sends no ControllerUnpublish, whatever the plugin says
	// later. What a release undoes is what the claim recorded at publish
	// (StagingPath, TargetPath, ExternalNodeID, Unattached), never the
	// node's or plugin's registration today. Set by the store when the
	// claim is committed; kept by every checkpoint.
	Unattached bool `json:"unattached,omitempty"`
	// Restored marks a claim that came back from an operator snapshot
	// restore: the machines kept running after the snapshot was taken, so
	// what it recorded about its node effects may be stale. Its staging
	// is in doubt (Claim.Staged: unknown), so the next claim on its
	// machine stages again, and it still counts as needing the path while
	// its target may be published. Never cleared.
	Restored bool `json:"restored,omitempty"`

	// Release bookkeeping.
	Attempts     int         `json:"attempts"`
	NextAttempt  time.Time   `json:"next_attempt,omitempty"`
	FirstFailure time.Time   `json:"first_failure,omitempty"` // start of the current run of failures, for stuck_after
	LastError    *ClaimError `json:"last_error,omitempty"`
	SkipNodeStep bool        `json:"skip_node_step,omitempty"`
	// NodeUnpublished records, while the claim is still taken, that its
	// NodeUnpublishVolume succeeded and its NodeUnstageVolume is next: a
	// retry, a leader change or a node agent restart resumes at the
	// unstage instead of repeating the unpublish. It is written
	// only when an unstage follows; a claim without one goes from taken to
	// node-detached in one checkpoint. Once set it is never cleared.
	NodeUnpublished bool `json:"node_unpublished,omitempty"`
	// FenceReason is set when the node steps were skipped because the
	// claim's node is fenced: the operator's (or module's) attestation
	// that the node is off, kept on the claim as the reason for the
	// forced detach.
	FenceReason string `json:"fence_reason,omitempty"`
	// Hold is set while a release policy keeps a releasable claim waiting:
	// who holds it, why and until when (`volume status`), and since when,
	// so a hold counts toward stuck_after like a failure does.
	Hold *ClaimHold `json:"hold,omitempty"`

	CreateTime  time.Time `json:"create_time"`
	ModifyTime  time.Time `json:"modify_time"`
	CreateIndex uint64    `json:"create_index"`
	ModifyIndex uint64    `json:"modify_index"`
}

// Copy returns a deep copy, so a store object is never mutated in place.
func (c *Claim) Copy() *Claim {
	if c == nil {
		return nil
	}
	n := *c
	n.PublishContext = copyMap(c.PublishContext)
	if c.LastError != nil {
		e := *c.LastError
		n.LastError = &e
	}
	if c.Hold != nil {
		h := *c.Hold
		n.Hold = &h
	}
	return &n
}

// ClaimHold records a release policy's decision to keep a releasable claim
// waiting. It is written when a hold starts or its holder or reason
// changes, never on every pass (no log writes in a loop,
// hashicorp/nomad#25349).
type ClaimHold struct {
	Module        string    `json:"module,omitempty"`
	ModuleVersion string    `json:"module_version,omitempty"`
	Reason        string    `json:"reason,omitempty"`
	Since         time.Time `json:"since"`
	Until         time.Time `json:"until,omitempty"` // zero: until something changes
}

// Holder names the module holding the claim: "name@version", or "the
// release policy" when the policy has no name.
func (h *ClaimHold) Holder() string {
	switch {
	case h.Module == "":
		return "the release policy"
	case h.ModuleVersion == "":
		return h.Module
	}
	return h.Module + "@" + h.ModuleVersion
}

// Stuck says why a volume's claims cannot be released without an operator.
type Stuck struct {
	Since    time.Time `json:"since"`
	Reason   string    `json:"reason"`
	AllocID  string    `json:"alloc_id,omitempty"`
	NodeID   string    `json:"node_id,omitempty"`
	Module   string    `json:"module,omitempty"`
	Fault    string    `json:"fault,omitempty"`
	Code     uint32    `json:"code,omitempty"`
	CodeName string    `json:"code_name,omitempty"`
	Attempts int       `json:"attempts"`
}

// Volume is a CSI volume registered with volhost and the claims on it.
type Volume struct {
	Namespace      string            `json:"namespace"`
	ID             string            `json:"id"`
	Name           string            `json:"name,omitempty"`
	ExternalID     string            `json:"external_id"`
	PluginID       string            `json:"plugin_id"`
	AccessMode     AccessMode        `json:"access_mode"`
	AttachmentMode AttachmentMode    `json:"attachment_mode"`
	MountFlags     []string          `json:"mount_flags,omitempty"`
	FSType         string            `json:"fs_type,omitempty"`
	Secrets        map[string]string `json:"secrets,omitempty"`
	Parameters     map[string]string `json:"parameters,omitempty"`
	Context        map[string]string `json:"context,omitempty"`

	// Claims by allocation ID. (The API always answers "claims", {} for
	// none; the persisted form omits an empty map.)
	Claims map[string]*Claim `json:"claims,omitempty"`
	Stuck  *Stuck            `json:"stuck,omitempty"`

	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// Copy returns a deep copy.
func (v *Volume) Copy() *Volume {
	if v == nil {
		return nil
	}
	n := *v
	n.MountFlags = append([]string(nil), v.MountFlags...)
	n.Secrets = copyMap(v.Secrets)
	n.Parameters = copyMap(v.Parameters)
	n.Context = copyMap(v.Context)
	if v.Claims != nil {
		n.Claims = make(map[string]*Claim, len(v.Claims))
		for k, c := range v.Claims {
			n.Claims[k] = c.Copy()
		}
	}
	if v.Stuck != nil {
		s := *v.Stuck
		n.Stuck = &s
	}
	return &n
}

// Allocs returns the allocation IDs holding the volume in the given mode.
// A claim counts until it reaches ready-to-free: before that the volume must
// read as in use, so no new writer races the controller detach
// (hashicorp/nomad#8609).
func (v *Volume) Allocs(mode ClaimMode) []string {
	var ids []string
	for id, c := range v.Claims {
		if c.Mode == mode && c.State != ClaimReadyToFree {
			ids = append(ids, id)
		}
	}
	return ids
}

// ClaimIDs returns the allocation IDs of v's claims in order: whatever
// walks the claims and may stop at one (a refusal, the first conflict)
// names the same one on every replica and every run.
func (v *Volume) ClaimIDs() []string {
	if len(v.Claims) == 0 {
		return nil // most volumes: a restore asks a million of them
	}
	return slices.Sorted(maps.Keys(v.Claims))
}

// InUse reports whether any claim still holds the volume.
func (v *Volume) InUse() bool {
	for _, c := range v.Claims {
		if c.State != ClaimReadyToFree {
			return true
		}
	}
	return false
}

// Alloc client statuses, as the scheduler's client reports them.
type AllocClientStatus string

const (
	AllocPending  AllocClientStatus = "pending"
	AllocRunning  AllocClientStatus = "running"
	AllocComplete AllocClientStatus = "complete"
	AllocFailed   AllocClientStatus = "failed"
	AllocLost     AllocClientStatus = "lost"
)

// AllocClientStatuses lists every client status, for the messages that name them.
var AllocClientStatuses = []AllocClientStatus{AllocPending, AllocRunning, AllocComplete, AllocFailed, AllocLost}

// Valid reports whether s is a known client status.
func (s AllocClientStatus) Valid() bool { return slices.Contains(AllocClientStatuses, s) }

// Terminal reports whether the allocation has stopped for good on its client.
func (s AllocClientStatus) Terminal() bool {
	return s == AllocComplete || s == AllocFailed || s == AllocLost
}

// Alloc is a workload instance placed on a node.
type Alloc struct {
	ID           string            `json:"id"`
	Namespace    string            `json:"namespace"`
	NodeID       string            `json:"node_id"`
	JobID        string            `json:"job_id,omitempty"`
	ClientStatus AllocClientStatus `json:"client_status"`
	// Source names the scheduler source that mirrors the allocation
	// ("nomad", host/scheduler); empty for one registered through the
	// API. A source only writes and judges the allocations it mirrors.
	Source      string    `json:"source,omitempty"`
	ModifyTime  time.Time `json:"modify_time"`
	CreateIndex uint64    `json:"create_index"`
	ModifyIndex uint64    `json:"modify_index"`
}

// Copy returns a copy.
func (a *Alloc) Copy() *Alloc {
	if a == nil {
		return nil
	}
	n := *a
	return &n
}

// NodeStatus is a node's health as the scheduler sees it.
type NodeStatus string

const (
	NodeReady NodeStatus = "ready"
	NodeDown  NodeStatus = "down"
	// NodeGone is a node down for longer than node_gc_threshold: its node
	// agent is not expected back. The release policy sees it
	// as it sees a node removed from the store.
	NodeGone NodeStatus = "gone"
)

// Valid reports whether s is a known node status.
func (s NodeStatus) Valid() bool { return s == NodeReady || s == NodeDown || s == NodeGone }

// NodePlugin is a CSI node plugin running on a node.
type NodePlugin struct {
	PluginID string `json:"plugin_id"`
	Endpoint string `json:"endpoint"` // unix:///path or tcp://host:port
	// ExternalNodeID is what NodeGetInfo reported when the endpoint was registered.
	ExternalNodeID string `json:"external_node_id"`
	// StageUnstage is the node's STAGE_UNSTAGE_VOLUME capability.
	StageUnstage bool  `json:"stage_unstage"`
	MaxVolumes   int64 `json:"max_volumes,omitempty"`
	// ControllerService: the driver at this endpoint advertises
	// CONTROLLER_SERVICE (GetPluginCapabilities), so its plugin needs a
	// controller endpoint for releases to call ControllerUnpublish.
	ControllerService bool `json:"controller_service,omitempty"`
	// ProbeError is why the node agent's last probe of the plugin failed
	// (its socket away, not ready, no answer in time), empty when the
	// plugin answered. The agent registers the node anyway, so one plugin
	// restarting does not take the node and its other plugins' volumes
	// down with it; the store keeps what the plugin last answered
	// (ExternalNodeID and the capabilities: the machine has not changed
	// because its driver is restarting), claims on it are refused until it
	// answers, and its releases wait for it.
	ProbeError string `json:"probe_error,omitempty"`
}

// MaxProbeErrorLength bounds a NodePlugin's ProbeError (an agent's text,
// stored and shown).
const MaxProbeErrorLength = 512

// Answering says whether the plugin answered its node agent's last probe.
func (np *NodePlugin) Answering() bool { return np.ProbeError == "" }

// Answers is what a probe that succeeded reports of a node plugin: two
// entries with the same Answers are the same driver on the same machine.
func (np *NodePlugin) Answers() NodePluginAnswers {
	return NodePluginAnswers{ExternalNodeID: np.ExternalNodeID, StageUnstage: np.StageUnstage,
		MaxVolumes: np.MaxVolumes, ControllerService: np.ControllerService}
}

// NodePluginAnswers is the part of a NodePlugin a probe fills.
type NodePluginAnswers struct {
	ExternalNodeID    string
	StageUnstage      bool
	MaxVolumes        int64
	ControllerService bool
}

// SetAnswers writes a probe's answers into np.
func (np *NodePlugin) SetAnswers(a NodePluginAnswers) {
	np.ExternalNodeID, np.StageUnstage, np.MaxVolumes, np.ControllerService = a.ExternalNodeID, a.StageUnstage, a.MaxVolumes, a.ControllerService
}

// MissingControllerWarnings names each plugin of n whose driver advertises
// CONTROLLER_SERVICE while its registration (plugin, nil when unknown) has
// no controller endpoint: its releases would skip ControllerUnpublish and
// leave the disk attached to the node (this was silent).
func MissingControllerWarnings(n *Node, plugin func(id string) *Plugin) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(n.Plugins)) {
		np := n.Plugins[id]
		if np == nil || !np.ControllerService {
			continue
		}
		if p := plugin(id); p != nil && p.ControllerEndpoint == "" {
			out = append(out, fmt.Sprintf("plugin %q has no controller_endpoint, but its driver on node %q advertises CONTROLLER_SERVICE: "+
				"releases will skip ControllerUnpublish and leave volumes attached; register the plugin again with its controller endpoint", id, n.ID))
		}
	}
	return out
}

// Node is a client machine that runs allocations and CSI node plugins.
type Node struct {
	ID       string            `json:"id"`
	Status   NodeStatus        `json:"status"`
	Meta     map[string]string `json:"meta,omitempty"`
	RootDir  string            `json:"root_dir,omitempty"` // staging and target paths are derived under it
	LastSeen time.Time         `json:"last_seen"`
	// Plugins by plugin ID.
	Plugins map[string]*NodePlugin `json:"plugins,omitempty"`
	// Agent is set when the node registered through its node agent
	// (`volhost agent -client`): its plugin endpoints are node-local, so
	// the leader sends node steps down the agent's connection and never
	// dials them itself.
	Agent bool `json:"agent,omitempty"`
	// HeartbeatLost says the status is down or gone because the node's
	// agent stopped heartbeating: a timeout, which on its own never lets
	// a claim skip its node steps (Kubernetes #120344); only a fence does.
	HeartbeatLost bool `json:"heartbeat_lost,omitempty"`
	// StatusReason says why the host set the status (missed heartbeats).
	StatusReason string `json:"status_reason,omitempty"`
	// StatusSince is when the status last changed through the heartbeat
	// path; down plus node_gc_threshold makes the node gone.
	StatusSince time.Time `json:"status_since,omitzero"`
	// Fence, when set, is an attestation that the node is off: claims on
	// it skip their node steps and go to the controller step, and it
	// takes no new claim until unfenced. It belongs to the store: a node
	// re-registering keeps it.
	Fence *NodeFence `json:"fence,omitempty"`
	// RegisteredBy is the accessor of the ACL token that authorized the
	// node's last registration (its agent's hello, or PUT /v1/nodes);
	// empty without a token (ACLs off, or the anonymous policy). The
	// server sets it, never the caller. The state store refuses a
	// registration whose token no longer exists, or has expired, when
	// the registration commits: a hello authorized just before its token
	// was revoked must not register the node after the revocation.
	RegisteredBy string `json:"registered_by,omitempty"`
	CreateIndex  uint64 `json:"create_index"`
	ModifyIndex  uint64 `json:"modify_index"`
}

// NodeFence records who attested that a node is off, and why.
type NodeFence struct {
	Reason string `json:"reason"`
	// Source is "operator" (`volhost node fence`) or "module:NAME@VERSION"
	// (an adapter module confirming the fence, ABI 1.1).
	Source string `json:"source"`
	// Accessor is the ACL token accessor of the operator ("anonymous"
	// without ACLs), for the audit trail.
	Accessor string    `json:"accessor,omitempty"`
	Time     time.Time `json:"time"`
}

// FenceSourceOperator is the Source of an operator's fence.
const FenceSourceOperator = "operator"

// FenceSourceModule is the Source of a fence an adapter module confirmed.
func FenceSourceModule(name, version string) string {
	return "module:" + name + "@" + version
}

// ByModule reports whether an adapter module confirmed the fence.
func (f *NodeFence) ByModule() bool { return strings.HasPrefix(f.Source, "module:") }

// DisplayStatus is the status an operator reads: a fenced node that still
// heartbeats says so, because it is refused new claims although it is up.
func (n *Node) DisplayStatus() string {
	switch {
	case n.Fence != nil && n.Status == NodeReady:
		return "fenced, heartbeating"
	case n.Fence != nil:
		return "fenced, " + string(n.Status)
	}
	return string(n.Status)
}

// Copy returns a deep copy.
func (n *Node) Copy() *Node {
	if n == nil {
		return nil
	}
	c := *n
	c.Meta = copyMap(n.Meta)
	if n.Fence != nil {
		f := *n.Fence
		c.Fence = &f
	}
	if n.Plugins != nil {
		c.Plugins = make(map[string]*NodePlugin, len(n.Plugins))
		for k, p := range n.Plugins {
			if p == nil {
				// Kept as it is for validation to name (a null entry in a
				// request panicked here).
				c.Plugins[k] = nil
				continue
			}
			pp := *p
			c.Plugins[k] = &pp
		}
	}
	return &c
}

// ControllerCapabilities are what ControllerGetCapabilities reported.
type ControllerCapabilities struct {
	PublishUnpublish bool `json:"publish_unpublish"`
	CreateDelete     bool `json:"create_delete,omitempty"`
	PublishReadonly  bool `json:"publish_readonly,omitempty"`
}

// Plugin is a CSI plugin with (optionally) a controller service.
type Plugin struct {
	ID                 string                 `json:"id"`
	ControllerEndpoint string                 `json:"controller_endpoint,omitempty"`
	Provider           string                 `json:"provider,omitempty"` // GetPluginInfo name
	Version            string                 `json:"version,omitempty"`
	Capabilities       ControllerCapabilities `json:"capabilities"`
	CreateIndex        uint64                 `json:"create_index"`
	ModifyIndex        uint64                 `json:"modify_index"`
}

// Copy returns a copy.
func (p *Plugin) Copy() *Plugin {
	if p == nil {
		return nil
	}
	n := *p
	return &n
}

// Event types recorded in the bounded events table.
const (
	EventClaimTransition = "claim-transition"
	EventClaimFailed     = "claim-failed"
	EventClaimHeld       = "claim-held"
	EventVolumeStuck     = "volume-stuck"
	EventForceDeregister = "force-deregister"
	EventAutoForce       = "auto-force-deregister"
	EventModule          = "module"
	EventGC              = "claim-gc"
	// EventNodeStatus records a heartbeat transition (ready, down, gone),
	// or a node plugin that stopped or started answering its agent's
	// probe (Fields "plugin" and "probe"), and EventNodeFence a fence or
	// unfence, with its reason.
	EventNodeStatus = "node-status"
	EventNodeFence  = "node-fence"
	// EventScheduler records what a scheduler source (the Nomad bridge)
	// could not mirror or claim, and its resets: one event per problem.
	EventScheduler = "scheduler"
	// EventAudit records a privileged action (force deregister, detach,
	// restore, join, remove-peer, module reload, token and policy changes).
	// Fields["action"] names the action and Fields["accessor"] the ACL
	// token's accessor ID ("anonymous" without a token); audit events are
	// retained apart from the claim events so no flood evicts them.
	EventAudit = "audit"
)

// Choices joins the values an enumerated field takes, for the one wording
// every refusal of one uses: "must be one of " + Choices(...) + ", got %q".
func Choices[T ~string](vals ...T) string {
	s := make([]string, len(vals))
	for i, v := range vals {
		s[i] = string(v)
	}
	return strings.Join(s, ", ")
}

// EventTypes lists every event type above, in the order the docs list
// them: the values GET /v1/events?type= and `volhost events -type` accept
// (a type nothing records would filter everything out, silently).
// TestEventTypesListsEveryConstant keeps it whole.
var EventTypes = []string{
	EventClaimTransition, EventClaimFailed, EventClaimHeld, EventVolumeStuck,
	EventForceDeregister, EventAutoForce, EventModule, EventGC,
	EventNodeStatus, EventNodeFence, EventScheduler, EventAudit,
}

// ValidEventType reports whether t is one of EventTypes.
func ValidEventType(t string) bool { return slices.Contains(EventTypes, t) }

// Event is one entry of the bounded events table.
type Event struct {
	Index     uint64            `json:"index"`
	Time      time.Time         `json:"time"`
	Type      string            `json:"type"`
	Namespace string            `json:"namespace,omitempty"`
	VolumeID  string            `json:"volume_id,omitempty"`
	AllocID   string            `json:"alloc_id,omitempty"`
	NodeID    string            `json:"node_id,omitempty"`
	PluginID  string            `json:"plugin_id,omitempty"`
	Module    string            `json:"module,omitempty"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields,omitempty"`
}

// Leftover is an attachment that may remain on a node because a volume was
// force-deregistered before its claim was released (the reference system
// drops these silently: hashicorp/nomad#8641).
type Leftover struct {
	ID             string     `json:"id"` // namespace/volume/alloc
	Namespace      string     `json:"namespace"`
	VolumeID       string     `json:"volume_id"`
	ExternalID     string     `json:"external_id"`
	PluginID       string     `json:"plugin_id"`
	AllocID        string     `json:"alloc_id"`
	NodeID         string     `json:"node_id"`
	ExternalNodeID string     `json:"external_node_id,omitempty"`
	State          ClaimState `json:"state"` // the release state the claim had reached
	// InDoubt names the destructive call the claim's release had sent
	// with no definitive answer yet (NodeUnstageVolume or
	// ControllerUnpublishVolume: Claim.UnstageInDoubt, DetachInDoubt): it
	// may still run on the machine, so a claim of the same disk there
	// waits until the operator clears the leftover.
	InDoubt     string    `json:"in_doubt,omitempty"`
	Reason      string    `json:"reason"`
	Time        time.Time `json:"time"`
	CreateIndex uint64    `json:"create_index"`
}

func copyMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	n := make(map[string]string, len(m))
	for k, v := range m {
		n[k] = v
	}
	return n
}
