package csitest

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"

	csipb "github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Oracle is the real state behind one or more scripted plugins: the
// machines their node services run on (what is staged and published there)
// and the storage's controller attachments. It is the judge of the tests
// that use it: it keeps what the driver and the machines actually hold,
// whatever the host believes, and checks every call against the
// preconditions the CSI spec puts on the CO, recording each one broken as a
// Violation.
//
// A machine is a name the test chooses; every node service started with
// that Machine (and this Oracle) acts on the same staging paths and
// targets, so one machine can be reached through several endpoints, and one
// endpoint can be registered by the host under several node IDs. A
// machine's external node IDs are what its node services answer in
// NodeGetInfo; the controller's attachments are per (volume, external node
// ID), and the machine an attachment is on is the one owning that ID.
//
// A broken precondition is recorded and, like a real driver, the call
// still does what it was asked (a NodePublishVolume from a path nobody
// staged bind-mounts an empty directory; a ControllerUnpublishVolume under
// a mounted filesystem detaches the disk): the harm is in the state, and
// the test reads both. The one exception is the spec's own error: a
// ControllerPublishVolume of a single-node volume already attached
// elsewhere answers FAILED_PRECONDITION and attaches nothing.
type Oracle struct {
	mu         sync.Mutex
	machines   map[string]*machine
	machineOf  map[string]string         // external node ID -> machine
	attached   map[[2]string]*attachment // (volume, external node ID)
	publishes  bool                      // a controller with PUBLISH_UNPUBLISH_VOLUME serves this storage
	private    bool                      // a Server's own, made without NewOracle: never refuses a call
	violations []Violation
	checks     int
}

type machine struct {
	name      string
	staged    map[string]string // staging path -> volume ID
	published map[string]Target // target path -> what is mounted there
}

type attachment struct {
	singleNode bool // attached with a SINGLE_NODE_* access mode
}

// Target is a published target path on a machine.
type Target struct {
	VolumeID    string
	StagingPath string // the staging path it was published from ("" when the plugin does not stage)
}

// MachineState is a copy of one machine's state.
type MachineState struct {
	Name        string
	ExternalIDs []string          // what its node services answer in NodeGetInfo, sorted
	Staged      map[string]string // staging path -> volume ID
	Published   map[string]Target // target path -> target
}

// Attachment is a controller attachment.
type Attachment struct {
	VolumeID string
	NodeID   string // the external node ID it is attached to
	Machine  string // the machine owning NodeID, "" when none does
}

// Violation is a call that broke a precondition the CSI spec puts on the CO.
type Violation struct {
	Machine string // where the call ran ("" for a controller call to an unknown node)
	Call    Call
	Rule    string // the spec's rule, with its section
	Why     string // what the state was
	// With is, for RuleSingleNode, the external node ID the volume was
	// attached to.
	With string
	// Blocking are the paths on the machine that made the call a
	// violation: the targets still published (RuleUnstageAfterUnpublish,
	// RuleUnpublishAfterNode) or the staging paths still staged.
	Blocking []string
}

func (v Violation) String() string {
	where := v.Machine
	if where == "" {
		where = "controller"
	}
	return fmt.Sprintf("%s(volume %s%s) on %s broke %q: %s", v.Call.Method, v.Call.VolumeID, v.Call.detail(), where, v.Rule, v.Why)
}

func (c Call) detail() string {
	s := ""
	if c.NodeID != "" {
		s += ", node " + c.NodeID
	}
	if c.StagingPath != "" {
		s += ", staging " + c.StagingPath
	}
	if c.TargetPath != "" {
		s += ", target " + c.TargetPath
	}
	return s
}

// The spec's rules the Oracle checks (CSI spec v1, "RPC Interface").
const (
	// ControllerPublishVolume, error "Volume published to another node":
	// a volume without a MULTI_NODE capability that is attached to one
	// node answers FAILED_PRECONDITION when published to another.
	RuleSingleNode = "ControllerPublishVolume: a volume without a MULTI_NODE capability is published to one node at a time"
	// ControllerUnpublishVolume: "The CO MUST guarantee that this RPC is
	// called after all NodeUnstageVolume and NodeUnpublishVolume on the
	// volume are called and succeed on the node from which the volume is
	// being unpublished."
	RuleUnpublishAfterNode = "ControllerUnpublishVolume: after every NodeUnstageVolume and NodeUnpublishVolume of the volume on the node"
	// NodeStageVolume and NodePublishVolume: "If the corresponding
	// Controller Plugin has PUBLISH_UNPUBLISH_VOLUME controller capability,
	// the CO MUST guarantee that this RPC is called after
	// ControllerPublishVolume is called for the given volume on the given
	// node and returns a success."
	RuleAttachedFirst = "NodeStageVolume/NodePublishVolume: after ControllerPublishVolume of the volume to this node"
	// NodeStageVolumeRequest.staging_target_path: "The CO SHALL ensure
	// that there is only one staging_target_path per volume."
	RuleOneStagingPath = "NodeStageVolume: only one staging_target_path per volume on a node"
	// NodePublishVolume: "If the corresponding Node Plugin has
	// STAGE_UNSTAGE_VOLUME capability, the CO MUST guarantee that this RPC
	// is called after NodeStageVolume is called for the given volume on the
	// given node and returns a success."
	RuleStagedFirst = "NodePublishVolume: after NodeStageVolume of the volume at its staging_target_path on this node"
	// NodeUnstageVolume: "The CO MUST guarantee that this RPC is called
	// after all NodeUnpublishVolume have been called and returned success
	// for the given volume on the given node."
	RuleUnstageAfterUnpublish = "NodeUnstageVolume: after every NodeUnpublishVolume of the volume on the node"
)

// NewOracle returns an empty storage with no machines; start plugins with
// it in their Options.
func NewOracle() *Oracle {
	return &Oracle{machines: map[string]*machine{}, machineOf: map[string]string{}, attached: map[[2]string]*attachment{}}
}

// join registers a server's machine and identity.
func (o *Oracle) join(opts Options) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if opts.PublishUnpublish && !opts.NodeOnly {
		o.publishes = true
	}
	if opts.Machine == "" {
		return
	}
	o.machineLocked(opts.Machine)
	o.machineOf[opts.NodeID] = opts.Machine
}

func (o *Oracle) machineLocked(name string) *machine {
	m := o.machines[name]
	if m == nil {
		m = &machine{name: name, staged: map[string]string{}, published: map[string]Target{}}
		o.machines[name] = m
	}
	return m
}

func (o *Oracle) violate(m string, c Call, rule, format string, args ...any) {
	o.violations = append(o.violations, Violation{Machine: m, Call: c, Rule: rule, Why: fmt.Sprintf(format, args...)})
}

// attachedToLocked reports whether volume is attached to one of machine m's
// external node IDs.
func (o *Oracle) attachedToLocked(volume, m string) bool {
	for key := range o.attached {
		if key[0] == volume && o.machineOf[key[1]] == m {
			return true
		}
	}
	return false
}

func singleNode(vc *csipb.VolumeCapability) bool {
	switch vc.GetAccessMode().GetMode() {
	case csipb.VolumeCapability_AccessMode_SINGLE_NODE_WRITER,
		csipb.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY,
		csipb.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER,
		csipb.VolumeCapability_AccessMode_SINGLE_NODE_MULTI_WRITER:
		return true
	}
	return false
}

func (o *Oracle) controllerPublish(c Call, req *csipb.ControllerPublishVolumeRequest) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.checks++
	vol, node := req.GetVolumeId(), req.GetNodeId()
	for key, a := range o.attached {
		if key[0] == vol && key[1] != node && (a.singleNode || singleNode(req.GetVolumeCapability())) {
			o.violate(o.machineOf[node], c, RuleSingleNode, "attached to %s", key[1])
			o.violations[len(o.violations)-1].With = key[1]
			if o.private {
				break // the permissive model of the Servers made without an Oracle
			}
			return status.Errorf(codes.FailedPrecondition, "volume %s is published to node %s", vol, key[1])
		}
	}
	if a := o.attached[[2]string{vol, node}]; a == nil {
		o.attached[[2]string{vol, node}] = &attachment{singleNode: singleNode(req.GetVolumeCapability())}
	}
	return nil
}

func (o *Oracle) controllerUnpublish(c Call, req *csipb.ControllerUnpublishVolumeRequest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.checks++
	vol, node := req.GetVolumeId(), req.GetNodeId()
	if m := o.machines[o.machineOf[node]]; m != nil && o.attached[[2]string{vol, node}] != nil {
		paths, targets := m.stagedPaths(vol), m.targets(vol)
		switch {
		case len(targets) > 0:
			o.violate(m.name, c, RuleUnpublishAfterNode, "%s is still published at %v", vol, targets)
		case len(paths) > 0:
			o.violate(m.name, c, RuleUnpublishAfterNode, "%s is still staged at %v", vol, paths)
		}
		if len(paths)+len(targets) > 0 {
			o.violations[len(o.violations)-1].Blocking = append(targets, paths...)
		}
	}
	// Detaching a volume that is not attached is a success (the call is
	// idempotent): the harm of an unpublish aimed at the wrong node is
	// the attachment it leaves, which the test reads.
	delete(o.attached, [2]string{vol, node})
}

func (o *Oracle) nodeStage(mname string, c Call, req *csipb.NodeStageVolumeRequest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.machineLocked(mname)
	o.checks++
	vol, path := req.GetVolumeId(), req.GetStagingTargetPath()
	if o.publishes && !o.attachedToLocked(vol, mname) {
		o.violate(mname, c, RuleAttachedFirst, "%s is not attached to %s (attachments: %v)", vol, mname, o.attachmentsOfLocked(vol))
	}
	for _, other := range m.stagedPaths(vol) {
		if other != path {
			o.violate(mname, c, RuleOneStagingPath, "%s is already staged at %s", vol, other)
			break
		}
	}
	m.staged[path] = vol
}

func (o *Oracle) nodeUnstage(mname string, c Call, req *csipb.NodeUnstageVolumeRequest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.machineLocked(mname)
	o.checks++
	vol, path := req.GetVolumeId(), req.GetStagingTargetPath()
	if targets := m.targets(vol); len(targets) > 0 {
		o.violate(mname, c, RuleUnstageAfterUnpublish, "%s is still published at %v", vol, targets)
		o.violations[len(o.violations)-1].Blocking = targets
	}
	if m.staged[path] == vol {
		delete(m.staged, path)
	}
}

func (o *Oracle) nodePublish(mname string, stages bool, c Call, req *csipb.NodePublishVolumeRequest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.machineLocked(mname)
	o.checks++
	vol := req.GetVolumeId()
	if o.publishes && !o.attachedToLocked(vol, mname) {
		o.violate(mname, c, RuleAttachedFirst, "%s is not attached to %s (attachments: %v)", vol, mname, o.attachmentsOfLocked(vol))
	}
	staging := req.GetStagingTargetPath()
	if stages && m.staged[staging] != vol {
		o.violate(mname, c, RuleStagedFirst, "%s is not staged at %s (staged there: %v)", vol, staging, m.stagedPaths(vol))
	}
	m.published[req.GetTargetPath()] = Target{VolumeID: vol, StagingPath: staging}
}

func (o *Oracle) nodeUnpublish(mname string, req *csipb.NodeUnpublishVolumeRequest) {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.machineLocked(mname)
	if t, ok := m.published[req.GetTargetPath()]; ok && t.VolumeID == req.GetVolumeId() {
		delete(m.published, req.GetTargetPath())
	}
}

func (m *machine) stagedPaths(vol string) []string {
	var out []string
	for p, v := range m.staged {
		if v == vol {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (m *machine) targets(vol string) []string {
	var out []string
	for p, t := range m.published {
		if t.VolumeID == vol {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (o *Oracle) attachmentsOfLocked(vol string) []string {
	var out []string
	for key := range o.attached {
		if key[0] == vol {
			out = append(out, key[1])
		}
	}
	sort.Strings(out)
	return out
}

// isAttached is Server.Attached's answer.
func (o *Oracle) isAttached(volume, node string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.attached[[2]string{volume, node}] != nil
}

// Machine returns a copy of machine name's state (empty when unknown).
func (o *Oracle) Machine(name string) MachineState {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := MachineState{Name: name, Staged: map[string]string{}, Published: map[string]Target{}}
	for ext, m := range o.machineOf {
		if m == name {
			st.ExternalIDs = append(st.ExternalIDs, ext)
		}
	}
	sort.Strings(st.ExternalIDs)
	if m := o.machines[name]; m != nil {
		st.Staged, st.Published = maps.Clone(m.staged), maps.Clone(m.published)
	}
	return st
}

// Machines names every machine, sorted.
func (o *Oracle) Machines() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Sorted(maps.Keys(o.machines))
}

// MachineOf is the machine whose node service answers externalNodeID, or "".
func (o *Oracle) MachineOf(externalNodeID string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.machineOf[externalNodeID]
}

// Attachments lists the controller attachments, sorted by volume then node.
func (o *Oracle) Attachments() []Attachment {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Attachment, 0, len(o.attached))
	for key := range o.attached {
		out = append(out, Attachment{VolumeID: key[0], NodeID: key[1], Machine: o.machineOf[key[1]]})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].VolumeID != out[j].VolumeID {
			return out[i].VolumeID < out[j].VolumeID
		}
		return out[i].NodeID < out[j].NodeID
	})
	return out
}

// Attached reports whether volume is attached to externalNodeID.
func (o *Oracle) Attached(volume, externalNodeID string) bool {
	return o.isAttached(volume, externalNodeID)
}

// AttachedTo reports whether volume is attached to any external node ID of
// machine m.
func (o *Oracle) AttachedTo(volume, m string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.attachedToLocked(volume, m)
}

// Violations returns every broken precondition so far, in order.
func (o *Oracle) Violations() []Violation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.violations)
}

// Checks is how many calls have had their preconditions checked.
func (o *Oracle) Checks() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.checks
}
