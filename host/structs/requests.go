package structs

import "time"

// MessageType tags a command in the replicated log. Values are persisted in
// raft logs and snapshots: append new ones, never renumber.
type MessageType uint8

const (
	PluginUpsertType      MessageType = 1
	NodeUpsertType        MessageType = 2
	VolumeRegisterType    MessageType = 3
	VolumeDeregisterType  MessageType = 4
	AllocUpsertType       MessageType = 5
	VolumeClaimType       MessageType = 6 // a new claim (publishing, or taken), or a publishing claim confirmed taken
	ClaimCheckpointType   MessageType = 7 // a whole claim at a release transition or failed attempt
	VolumeStuckType       MessageType = 8
	ClaimGCType           MessageType = 9 // empty "GC claim": only bumps the volume's index
	LeftoversClearType    MessageType = 10
	EventAppendType       MessageType = 11
	NodeStatusUpdateType  MessageType = 12
	PluginDeregisterType  MessageType = 13
	NodeDeregisterType    MessageType = 14
	AllocDeleteType       MessageType = 15
	VolumeClaimRemoveType MessageType = 16 // drop a publishing claim whose every publish step was undone

	// Reserved ranges, so work on separate features never collides on a
	// persisted number: 17-29 claim safety (fencing, conditional
	// checkpoints), 30-49 ACL (tokens, policies, bootstrap), 50-69
	// integrity (keyring, snapshots), 70-89 node agent (heartbeats, fencing).

	NodeFenceType    MessageType = 70 // fence or unfence a node, with the reason
	NodeLivenessType MessageType = 71 // a heartbeat transition: ready, down, gone

	// 100-109 batched raft writes (group commit).

	// ClaimCheckpointBatchType carries several claim checkpoints in one
	// log entry (group commit). Each is checked (term fence, validation)
	// and answered on its own, in order, in one store transaction.
	ClaimCheckpointBatchType MessageType = 100

	// 110-119 scheduler sources (host/scheduler).

	// SchedulerSyncType mirrors a scheduler's allocations and records how
	// far its changes were applied, in one entry (SchedulerSyncRequest).
	SchedulerSyncType MessageType = 110
)

// ClaimCheckpointBatchRequest is a group commit of claim checkpoints. The
// FSM fences every checkpoint by its own Term; the store validates each
// against the state the ones before it left and applies those that pass:
// a refused checkpoint changes nothing and fails no other.
type ClaimCheckpointBatchRequest struct {
	Checkpoints []*ClaimCheckpointRequest `json:"checkpoints"`
}

// MaxCheckpointBatch bounds the checkpoints of one batch entry.
const MaxCheckpointBatch = 256

// PluginUpsertRequest registers or updates a CSI plugin.
type PluginUpsertRequest struct {
	Plugin *Plugin `json:"plugin"`
}

// PluginDeregisterRequest removes a plugin that no volume uses.
type PluginDeregisterRequest struct {
	PluginID string `json:"plugin_id"`
}

// NodeUpsertRequest registers or updates a node.
type NodeUpsertRequest struct {
	Node *Node `json:"node"`
	// HoldOperatorFields, the way the node is registered, has the store
	// judge the registration against the node as it stands at commit:
	//   - that one which sets or replaces an operator's decision
	//     (OperatorDecisionsReplaced) was made with a token
	//     (Node.RegisteredBy, or the anonymous policy: Anonymous) that may
	//     make one. The API and the node RPC check the token when the
	//     request arrives; an operator's direct-mode registration, or a
	//     narrowing of the policy, committed between that check and this
	//     write was not seen by it, and a node token replaced the
	//     operator's endpoints and root_dir;
	//   - and, for an agent's hello (ByItsAgent), the stored node's status
	//     is kept: the hello carried the status read when it arrived, and
	//     an operator's "down" committed since was undone by it.
	// "" (an older leader's entry) holds nothing.
	HoldOperatorFields RegistrationWay `json:"hold_operator_fields,omitempty"`
	// Anonymous: ACLs are on and the registration came without a token,
	// under the anonymous policy, which the store judges at commit as it
	// would a token's (with HoldOperatorFields).
	Anonymous bool `json:"anonymous,omitempty"`
}

// NodeStatusUpdateRequest changes a node's status.
type NodeStatusUpdateRequest struct {
	NodeID   string     `json:"node_id"`
	Status   NodeStatus `json:"status"`
	LastSeen time.Time  `json:"last_seen"`
}

// NodeDeregisterRequest removes a node (`volhost node deregister`). It is
// refused while an allocation on the node runs. Claims still on the node
// (of ended allocations, not yet released) refuse it too unless Force:
// with the node gone their node steps are skipped, which is safe only when
// the node is off or no longer mounts the volumes.
type NodeDeregisterRequest struct {
	NodeID string `json:"node_id"`
	Force  bool   `json:"force,omitempty"`
}

// NodeClaim is a claim on a node, named in the answer of a forced node
// deregister: its node steps will be skipped.
type NodeClaim struct {
	Namespace string     `json:"namespace"`
	VolumeID  string     `json:"volume_id"`
	AllocID   string     `json:"alloc_id"`
	State     ClaimState `json:"state"`
}

// VolumeRegisterRequest registers volumes.
type VolumeRegisterRequest struct {
	Volumes []*Volume `json:"volumes"`
}

// VolumeDeregisterRequest removes a volume. With Force, claims are dropped
// without CSI calls and recorded as Leftovers.
type VolumeDeregisterRequest struct {
	Namespace string    `json:"namespace"`
	VolumeID  string    `json:"volume_id"`
	Force     bool      `json:"force"`
	Reason    string    `json:"reason,omitempty"` // "operator" or "escape-hatch"
	Time      time.Time `json:"time"`
}

// AllocUpsertRequest registers allocations or updates their client status.
type AllocUpsertRequest struct {
	Allocs []*Alloc `json:"allocs"`
	// KeepNamespace makes the store refuse, at commit, an allocation that
	// moves namespace. The server sets it (never the caller); the leader
	// leaves it out while a server of the previous release, which moves
	// the allocation, could apply the same entry (gate
	// "alloc-keep-namespace"): replicas must decide alike. The leader
	// checks the move before the log either way.
	KeepNamespace bool `json:"keep_namespace,omitempty"`
}

// AllocDeleteRequest removes allocations (garbage-collected by the scheduler).
type AllocDeleteRequest struct {
	AllocIDs []string `json:"alloc_ids"`
}

// VolumeClaimRequest records a claim. The claim path writes it twice: in
// state publishing before its first CSI call (a new claim, checked like
// any: capacity, access mode, allocation and node), then in state taken
// once publish succeeded, over that same publishing record (same node,
// mode, external node ID and paths). A taken claim with no publishing
// record before it is a new claim too (log entries written before the
// publishing state existed).
type VolumeClaimRequest struct {
	Namespace string `json:"namespace"`
	VolumeID  string `json:"volume_id"`
	Claim     *Claim `json:"claim"`
	// Term is the leadership term the claim path ran its CSI calls in
	// (0: unfenced, tests). The FSM refuses the entry when it was appended
	// in another term: a deposed leader's claim is never recorded.
	Term uint64 `json:"term,omitempty"`
}

// FencedTerm implements the FSM's term fence.
func (r *VolumeClaimRequest) FencedTerm() uint64 { return r.Term }

// VolumeClaimRemoveRequest drops a publishing claim without release: the
// claim path that wrote it undid every publish step it ran, and nothing
// else may have acted under the record. The store refuses any other
// claim (one taken, releasing, or a publishing record written or changed
// by another run, ModifyIndex), and the FSM a request of another term.
type VolumeClaimRemoveRequest struct {
	Namespace string `json:"namespace"`
	VolumeID  string `json:"volume_id"`
	AllocID   string `json:"alloc_id"`
	// ModifyIndex is the index the remover's own publishing record was
	// committed at: the claim must still be that record.
	ModifyIndex uint64 `json:"modify_index"`
	// Term is the leadership term the claim path ran in (0: unfenced, tests).
	Term uint64 `json:"term,omitempty"`
}

// FencedTerm implements the FSM's term fence.
func (r *VolumeClaimRemoveRequest) FencedTerm() uint64 { return r.Term }

// ClaimCheckpointRequest writes a whole claim. A claim checkpointed at
// ready-to-free is removed from the volume in the same write.
type ClaimCheckpointRequest struct {
	Namespace string `json:"namespace"`
	VolumeID  string `json:"volume_id"`
	Claim     *Claim `json:"claim"`
	// Term is the leadership term of the watcher pass that wrote it (0:
	// unfenced, tests). The FSM refuses the entry when it was appended in
	// another term, so a pass of a deposed leader cannot move a claim.
	Term uint64 `json:"term,omitempty"`
	// Unstaged and ControllerUnpublished say that the transition ran
	// NodeUnstageVolume or ControllerUnpublishVolume, which are per
	// (volume, node), on the ground that no other live claim of the volume
	// on that node needed them. The store refuses the checkpoint when a
	// committed claim contradicts that (a claim taken on the node while
	// the release was deciding).
	Unstaged              bool `json:"unstaged,omitempty"`
	ControllerUnpublished bool `json:"controller_unpublished,omitempty"`
	// Free frees a claim checkpointed at controller-detached in
	// the same write: the store applies the controller-detached
	// transition, then ready-to-free (the claim leaves the volume), each
	// with its transition event, atomically. Nothing runs between the two
	// (no CSI call, no decision), so a separate log entry for the second
	// bought nothing but a log append, an FSM transaction and a watcher
	// pass per claim. Only valid with Claim.State controller-detached.
	Free bool `json:"free,omitempty"`
}

// FencedTerm implements the FSM's term fence.
func (r *ClaimCheckpointRequest) FencedTerm() uint64 { return r.Term }

// VolumeStuckRequest marks (Stuck != nil) or clears (Stuck == nil) a volume as stuck.
type VolumeStuckRequest struct {
	Namespace string `json:"namespace"`
	VolumeID  string `json:"volume_id"`
	Stuck     *Stuck `json:"stuck"`
}

// ClaimGCRequest is the empty "GC claim": applying it bumps the volumes'
// modify index, which wakes the watcher on the leader.
type ClaimGCRequest struct {
	Volumes []VolumeRef `json:"volumes"`
}

// VolumeRef names a volume.
type VolumeRef struct {
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
}

// LeftoversClearRequest removes leftovers by ID (all of them when empty and All is set).
type LeftoversClearRequest struct {
	IDs []string `json:"ids"`
	All bool     `json:"all"`
}

// EventAppendRequest records events that are not a side effect of another write
// (module loaded, refused, circuit opened).
type EventAppendRequest struct {
	Events []*Event `json:"events"`
}

// DetachResult answers `volume detach VOL NODE`: what each of that node's
// claims reached. A claim that could not finish keeps its error.
type DetachResult struct {
	Namespace string   `json:"namespace"`
	VolumeID  string   `json:"volume_id"`
	NodeID    string   `json:"node_id"`
	Claims    []*Claim `json:"claims"`   // as they stand after the attempt
	Released  []string `json:"released"` // alloc IDs whose claims reached ready-to-free
}

// ClaimRequest asks for a new claim on a volume (`volume claim`).
type ClaimRequest struct {
	Namespace      string         `json:"namespace"`
	VolumeID       string         `json:"volume_id"`
	AllocID        string         `json:"alloc_id"`
	NodeID         string         `json:"node_id"`
	Mode           ClaimMode      `json:"mode"`
	AccessMode     AccessMode     `json:"access_mode,omitempty"`     // defaults to the volume's
	AttachmentMode AttachmentMode `json:"attachment_mode,omitempty"` // defaults to the volume's
}

// NodeFenceRequest fences (Fence != nil) or unfences (Fence == nil) a node.
type NodeFenceRequest struct {
	NodeID string     `json:"node_id"`
	Fence  *NodeFence `json:"fence,omitempty"`
	// Accessor names who unfenced, for the event (a fence carries its own).
	Accessor string `json:"accessor,omitempty"`
	// A module's fence (Fence.ByModule, ABI 1.1) is the watcher's write:
	// LostSince is the node's StatusSince the module was asked about, and
	// the store refuses the fence unless the node is still heartbeat-lost
	// since then, unfenced; Term fences it by leadership term like every
	// watcher write (0 for an operator's fence).
	LostSince time.Time `json:"lost_since,omitzero"`
	Term      uint64    `json:"term,omitempty"`
}

// FencedTerm implements the FSM's term fence.
func (r *NodeFenceRequest) FencedTerm() uint64 { return r.Term }

// NodeLivenessRequest records a transition the leader's heartbeat tracker
// decided: ready when the node's agent heartbeats (again), down after the
// heartbeat TTL, gone after node_gc_threshold down. Time is when the
// transition was decided (the last heartbeat for a down node).
type NodeLivenessRequest struct {
	NodeID string     `json:"node_id"`
	Status NodeStatus `json:"status"`
	Reason string     `json:"reason,omitempty"`
	// From is the status the tracker saw; the store refuses the entry when
	// the node has moved since, so a stale decision never overwrites a
	// newer one (a heartbeat racing the TTL).
	From NodeStatus `json:"from"`
	// FromHeartbeatLost is whether the deciding side saw the node's
	// heartbeat lost with From; the store refuses the entry when that has
	// changed too. An operator's "down" over a node whose heartbeat was
	// lost keeps the status and clears the mark, and a heartbeat's
	// "down to ready" decided before it undid the operator's word. nil:
	// not checked (an older leader's entry).
	FromHeartbeatLost *bool     `json:"from_heartbeat_lost,omitempty"`
	Time              time.Time `json:"time"`
	// Term is the leadership term of the tracker that decided it: a
	// deposed leader's tracker never marks a node down (FSM term fence).
	Term uint64 `json:"term,omitempty"`
}

// FencedTerm implements the FSM's term fence.
func (r *NodeLivenessRequest) FencedTerm() uint64 { return r.Term }
