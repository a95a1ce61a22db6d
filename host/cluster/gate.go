package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/volhost/volhost/host/structs"
)

// Feature names a log entry type, or a field of an older type, that a
// server must understand to apply the log correctly. A server that does
// not know an entry type would skip it, and one that does not know a
// field would apply the entry without it: either way its replica silently
// diverges (an older follower kept a freed claim at controller-detached).
// So the leader writes a gated form only once the feature is enabled, and
// it enables a feature only when every server of the raft configuration
// advertises it (Nomad's ServersMeetMinimumVersion pattern). Enabling is
// recorded in the log and never undone: from then on a server that lacks
// the feature cannot join.
type Feature string

// The features of gates. Persisted in the log and in snapshots: append,
// never rename.
const (
	FeatureACL             Feature = "acl"
	FeatureKeyring         Feature = "keyring"
	FeatureNodeFence       Feature = "node-fence"
	FeatureNodeLiveness    Feature = "node-liveness"
	FeatureCheckpointBatch Feature = "checkpoint-batch"
	FeatureNodeUnpublished Feature = "claim-node-unpublished"
	FeatureCheckpointFree  Feature = "checkpoint-free"
	FeatureSchedulerSync   Feature = "scheduler-sync"
	FeatureClaimPublishing Feature = "claim-publishing"
	FeatureClaimUnattached Feature = "claim-unattached"
	FeatureClaimRestored   Feature = "claim-restored"
	FeatureNodeRegistrar   Feature = "node-registered-by"
	FeatureAllocNamespace  Feature = "alloc-keep-namespace"
	FeatureNodeOperator    Feature = "node-hold-operator-fields"
	FeatureLivenessLost    Feature = "node-liveness-from-lost"
)

// gate is one row of the feature table.
type gate struct {
	Feature Feature
	// Since is the first volhost version that advertises the feature.
	Since string
	// Types are the state store entry types the feature introduced; Meta
	// the cluster-owned ones (meta.go).
	Types []structs.MessageType
	Meta  []byte
	// Uses reports whether a request of an older type carries the
	// feature's field (nil: the feature adds no field).
	Uses func(req any) bool
	// Older says what the leader writes while the feature is off; ""
	// means the write is refused (ErrFeatureNotEnabled).
	Older string
	// CheckAsked: the older form leaves out a mark that has the store
	// check a rule again at commit, so the leader holds the request as
	// asked to every rule before the log (Cluster.Apply).
	CheckAsked bool
}

// gates is the one table of gated log forms. A new entry type or a field
// older servers would mishandle gets a row here (and nowhere else): the
// leader's write path (checkGate), the enabling (reconcileFeatures), the
// FSM's refusal of an unknown type (unknownEntry) and `volhost version`
// all read it. The rows before GateVersion describe what servers that
// advertise no features lack: they came after the first multi-server
// release.
var gates = []gate{
	{Feature: FeatureACL, Since: GateVersion, Types: []structs.MessageType{
		structs.ACLBootstrapType, structs.ACLPolicyUpsertType, structs.ACLPolicyDeleteType,
		structs.ACLTokenUpsertType, structs.ACLTokenDeleteType}},
	{Feature: FeatureKeyring, Since: GateVersion, Meta: []byte{keyringAddType},
		Older: "no keyring: the leader creates it once the feature is enabled"},
	{Feature: FeatureNodeFence, Since: GateVersion, Types: []structs.MessageType{structs.NodeFenceType}},
	{Feature: FeatureNodeLiveness, Since: GateVersion, Types: []structs.MessageType{structs.NodeLivenessType}},
	{Feature: FeatureCheckpointBatch, Since: GateVersion, Types: []structs.MessageType{structs.ClaimCheckpointBatchType},
		Older: "one claim checkpoint entry per checkpoint"},
	{Feature: FeatureNodeUnpublished, Since: GateVersion, Uses: func(req any) bool {
		return anyCheckpoint(req, func(ck *structs.ClaimCheckpointRequest) bool { return ck.Claim != nil && ck.Claim.NodeUnpublished })
	}, Older: "the checkpoint without the mark: a retry repeats NodeUnpublishVolume, which the CSI spec makes idempotent"},
	{Feature: FeatureCheckpointFree, Since: GateVersion, Uses: func(req any) bool {
		return anyCheckpoint(req, func(ck *structs.ClaimCheckpointRequest) bool { return ck.Free })
	}, Older: "two checkpoints: controller-detached, then ready-to-free"},
	{Feature: FeatureSchedulerSync, Since: GateVersion, Types: []structs.MessageType{structs.SchedulerSyncType},
		Older: "", // refused: a scheduler bridge retries until every server understands its batches
	},
	// A server without the publishing state refuses a claim written in
	// it (its store knows only taken), so its replica would lack the
	// claim; and it would drop any claim on a type-16 removal, which now
	// removes only the remover's own publishing record.
	{Feature: FeatureClaimPublishing, Since: GateVersion, Uses: func(req any) bool {
		switch r := req.(type) {
		case *structs.VolumeClaimRequest:
			return r != nil && r.Claim != nil && r.Claim.State == structs.ClaimPublishing
		case *structs.VolumeClaimRemoveRequest:
			return r != nil
		}
		return anyCheckpoint(req, func(ck *structs.ClaimCheckpointRequest) bool {
			return ck.Claim != nil && ck.Claim.State == structs.ClaimPublishing
		})
	}, Older: "the claim path calls the plugins first and writes the claim taken after, as releases before the write-ahead record did: " +
		"a leader lost mid-publish leaves an attachment or mount no claim accounts for"},
	// The store derives Unattached when it commits a claim and every
	// checkpoint keeps the committed value, so the leader drops it from
	// what it writes; an older server drops the field anyway.
	{Feature: FeatureClaimUnattached, Since: GateVersion, Uses: func(req any) bool {
		return anyClaim(req, func(c *structs.Claim) bool { return c.Unattached })
	}, Older: "the claim without the mark (the store keeps its own); an older leader's release sends ControllerUnpublishVolume " +
		"by the plugin's capability, which the CSI spec makes idempotent for a volume not attached"},
	// Restored is set by an operator snapshot restore, which older
	// servers would install without it: the restore is refused until
	// every server keeps the mark (RestoreSnapshot).
	{Feature: FeatureClaimRestored, Since: GateVersion, Uses: func(req any) bool {
		return anyClaim(req, func(c *structs.Claim) bool { return c.Restored })
	}, Older: "the claim without the mark (the store keeps its own); an operator snapshot restore is refused"},
	// The store checks, at commit, that a registration's token still
	// exists; an older server would register the node regardless.
	{Feature: FeatureNodeRegistrar, Since: GateVersion, Uses: func(req any) bool {
		r, ok := req.(*structs.NodeUpsertRequest)
		return ok && r != nil && r.Node != nil && r.Node.RegisteredBy != ""
	}, Older: "the registration without its token's accessor: a token revoked between the request's check and the commit " +
		"does not stop the registration"},
	// The store refuses, at commit, an allocation that moves namespace;
	// a server of the previous release applies the move.
	{Feature: FeatureAllocNamespace, Since: GateVersion, Uses: func(req any) bool {
		r, ok := req.(*structs.AllocUpsertRequest)
		return ok && r != nil && r.KeepNamespace
	}, CheckAsked: true,
		Older: "the write without the mark: the leader refuses a namespace move before the log, the store does not check it again at commit"},
	// The store refuses, at commit, a registration by a token without
	// operator:write that sets or replaces an operator's decision; a
	// server of the previous release registers it.
	{Feature: FeatureNodeOperator, Since: GateVersion, Uses: func(req any) bool {
		r, ok := req.(*structs.NodeUpsertRequest)
		return ok && r != nil && (r.HoldOperatorFields != "" || r.Anonymous)
	}, CheckAsked: true,
		Older: "the registration without the mark: the API and the node RPC refuse a node token's operator fields when the request arrives, " +
			"the store does not judge them again at commit, and an agent's hello writes the status it read"},
	// The store refuses, at commit, a liveness transition decided from a
	// heartbeat-lost mark that has changed since; a server of the
	// previous release applies it.
	{Feature: FeatureLivenessLost, Since: GateVersion, Uses: func(req any) bool {
		r, ok := req.(*structs.NodeLivenessRequest)
		return ok && r != nil && r.FromHeartbeatLost != nil
	}, CheckAsked: true,
		Older: "the transition without the mark: the store checks the status it assumed, not whether that status was a lost heartbeat's"},
	// New rows go here: {Feature: "...", Since: "<first version writing it>", Types: ...}.
}

// legacyType reports whether t is one of the state store commands of the
// first multi-server release (1-16), which every server understands,
// including those older than the gates. Any other type needs a row in
// gates (TestGateTableCoversNewTypes).
func legacyType(t structs.MessageType) bool {
	return t >= structs.PluginUpsertType && t <= structs.VolumeClaimRemoveType
}

// checksAsked reports whether a gate asks the leader to validate req as
// asked, before its older form is written (gate.CheckAsked).
func checksAsked(req any) bool {
	for _, g := range gates {
		if g.CheckAsked && g.Uses != nil && g.Uses(req) {
			return true
		}
	}
	return false
}

// anyCheckpoint reports whether a checkpoint (or one of a batch) in req
// matches.
func anyCheckpoint(req any, match func(*structs.ClaimCheckpointRequest) bool) bool {
	switch r := req.(type) {
	case *structs.ClaimCheckpointRequest:
		return r != nil && match(r)
	case *structs.ClaimCheckpointBatchRequest:
		return r != nil && slices.ContainsFunc(r.Checkpoints, func(ck *structs.ClaimCheckpointRequest) bool { return ck != nil && match(ck) })
	}
	return false
}

// anyClaim reports whether a claim written by req (a claim, a checkpoint
// or one of a batch) matches.
func anyClaim(req any, match func(*structs.Claim) bool) bool {
	if r, ok := req.(*structs.VolumeClaimRequest); ok {
		return r != nil && r.Claim != nil && match(r.Claim)
	}
	return anyCheckpoint(req, func(ck *structs.ClaimCheckpointRequest) bool { return ck.Claim != nil && match(ck.Claim) })
}

// gateOf returns the row of a feature.
func gateOf(f Feature) (gate, bool) {
	for _, g := range gates {
		if g.Feature == f {
			return g, true
		}
	}
	return gate{}, false
}

// gatesOfType returns the features an entry of type t with request req
// needs.
func gatesOfType(t structs.MessageType, req any) []gate {
	var out []gate
	for _, g := range gates {
		if slices.Contains(g.Types, t) || (g.Uses != nil && g.Uses(req)) {
			out = append(out, g)
		}
	}
	return out
}

// gateOfMeta returns the feature a cluster-owned command type needs.
func gateOfMeta(t byte) (gate, bool) {
	for _, g := range gates {
		if slices.Contains(g.Meta, t) {
			return g, true
		}
	}
	return gate{}, false
}

// ErrFeatureNotEnabled refuses a write of a gated form while some server
// of the cluster does not understand it. It wraps structs.ErrConflict
// (409): the cluster's state, not the request, is what refuses.
var ErrFeatureNotEnabled = errors.New("feature not enabled")

// EnabledFeature is a feature as the log records its enabling: with the
// types it covers and the version that introduced it, so a server that
// meets one of those types without knowing it (an older binary started on
// newer data) can still say which version it needs.
type EnabledFeature struct {
	Name  string   `json:"name"`
	Since string   `json:"since"`
	Types []uint16 `json:"types,omitempty"`
	Meta  []uint16 `json:"meta,omitempty"`
}

func enabledOf(g gate) EnabledFeature {
	e := EnabledFeature{Name: string(g.Feature), Since: g.Since}
	for _, t := range g.Types {
		e.Types = append(e.Types, uint16(t))
	}
	for _, t := range g.Meta {
		e.Meta = append(e.Meta, uint16(t))
	}
	return e
}

// FeatureEnabled reports whether the cluster has enabled f (every server
// understands it).
func (c *Cluster) FeatureEnabled(f Feature) bool { return c.meta.enabled(string(f)) }

// EnabledFeatures lists the enabled features, sorted.
func (c *Cluster) EnabledFeatures() []string { return c.meta.enabledNames() }

// checkGate refuses a write of a form some server does not understand
// yet. It runs on the leader before the entry is appended; every write
// path calls it (Apply, the checkpoint batcher, applyMeta).
func (c *Cluster) checkGate(t structs.MessageType, req any) error {
	for _, g := range gatesOfType(t, req) {
		if err := c.needFeature(g, fmt.Sprintf("log entry type %d", t)); err != nil {
			return err
		}
	}
	return nil
}

// gateSettleWait bounds how long a gated write waits for a leader still
// stepping up to record the servers' features and enable them.
const gateSettleWait = 10 * time.Second

// checkGateSettled is checkGate for a write that may arrive while this
// leader is still stepping up. The members' feature records and the
// enabling are written by the step-up (reconcileMeta, after the barrier),
// so in the first moments of a new cluster, or of a new leader whose
// predecessor lost its leadership before enabling, every gate reads
// closed although every server understands it: an `acl bootstrap` sent as
// soon as a leader is elected was refused with "upgrade s2". Such a write
// waits for the step-up (like the claim path's readyTerm), then is judged;
// a gate still closed after it is a real refusal.
func (c *Cluster) checkGateSettled(ctx context.Context, t structs.MessageType, req any) error {
	err := c.checkGate(t, req)
	if err == nil || c.ReadyTerm() != 0 || !c.IsLeader() {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, gateSettleWait)
	defer cancel()
	if c.WaitForLeader(wctx) != nil {
		return err
	}
	return c.checkGate(t, req)
}

// needFeature is nil when g is enabled, else the refusal naming the
// servers to upgrade.
func (c *Cluster) needFeature(g gate, what string) error {
	if c.meta.enabled(string(g.Feature)) {
		return nil
	}
	lacking := c.lacking(g.Feature)
	who := "a server that has not advertised its features yet"
	if len(lacking) > 0 {
		who = strings.Join(lacking, ", ")
	}
	return fmt.Errorf("%w: %w: the cluster has servers that do not understand %s (%s): upgrade %s to volhost %s or later",
		ErrFeatureNotEnabled, structs.ErrConflict, g.Feature, what, who, g.Since)
}

// lacking names the servers of the raft configuration that do not
// advertise f.
func (c *Cluster) lacking(f Feature) []string {
	servers, err := c.configServers()
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range servers {
		m, ok := c.meta.member(string(s.ID))
		if !ok {
			m = Member{ID: string(s.ID)}
		}
		if !understands(m.Features, f) {
			out = append(out, describeServer(m))
		}
	}
	return out
}

// configServers is the latest raft configuration's servers (voters and
// non-voters: both apply the log).
func (c *Cluster) configServers() ([]raft.Server, error) {
	f := c.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, raftErr("configuration", err)
	}
	return f.Configuration().Servers, nil
}

// reconcileFeatures runs on the leader (step-up, a join, a removal, a
// member's new record): it enables every feature that each server of the
// raft configuration advertises and that is not enabled yet, in one log
// entry. A server without a member record, or whose record advertises no
// features, holds every gate closed. gateMu orders it with Join, so a
// server that lacks a feature is never added between the count and the
// enabling.
func (c *Cluster) reconcileFeatures(ctx context.Context) error {
	c.gateMu.Lock()
	defer c.gateMu.Unlock()
	servers, err := c.configServers()
	if err != nil {
		return err
	}
	var add []EnabledFeature
	for _, g := range gates {
		if c.meta.enabled(string(g.Feature)) {
			continue
		}
		all := len(servers) > 0
		for _, s := range servers {
			m, ok := c.meta.member(string(s.ID))
			all = all && ok && understands(m.Features, g.Feature)
		}
		if all {
			add = append(add, enabledOf(g))
		}
	}
	if len(add) == 0 {
		return nil
	}
	if err := c.applyMeta(ctx, featuresEnableType, metaCommand{Enable: add}); err != nil {
		return fmt.Errorf("enable features: %w", err)
	}
	names := make([]string, len(add))
	for i, e := range add {
		names[i] = e.Name
	}
	c.logger.Info("features enabled: every server understands them", "features", strings.Join(names, ","))
	// Forms held back until now (older.go) need no catching up, but the
	// keyring was not created: create it.
	c.ensureKeyring(ctx)
	return nil
}

// checkJoinFeatures refuses a joiner that lacks a feature the cluster
// already enabled: entries of that form may be in the log, and it would
// stop at the first one (or, being older than the gates, skip it).
func (c *Cluster) checkJoinFeatures(req JoinRequest) error {
	var missing []string
	for _, e := range c.meta.enabledList() {
		if !slices.Contains(req.Features, e.Name) {
			missing = append(missing, fmt.Sprintf("%s, since volhost %s", e.Name, e.Since))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w: server %s does not understand the features this cluster enabled (%s): upgrade it first",
		ErrJoinRefused, structs.ErrConflict, describeServer(Member{ID: req.ID, Build: req.Build, Features: req.Features}),
		strings.Join(missing, "; "))
}

// ClaimsWriteAhead reports whether the claim path may write its
// publishing record (claim-publishing is enabled); until then it calls the
// plugins first and commits the claim taken after (host/server).
func (c *Cluster) ClaimsWriteAhead() bool { return c.FeatureEnabled(FeatureClaimPublishing) }
