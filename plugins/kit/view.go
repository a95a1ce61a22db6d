package kit

import (
	"fmt"
	"maps"

	"github.com/volhost/volhost/abi"
)

// The JSON form of the abi messages: snake_case names, enums as words. It is
// what case files hold and what `module record` writes; the abi structs have
// no JSON form of their own (their wire format is protobuf).

// Calls a case can make.
const (
	CallDecide   = "decide_release" // release-policy: PolicyRequest -> PolicyResponse
	CallAdapt    = "adapt_request"  // csi-adapter: AdapterRequest -> AdapterResponse
	CallClassify = "classify_error" // csi-adapter: ClassifyRequest -> ClassifyResponse
)

// VolumeJSON is abi.VolumeView.
type VolumeJSON struct {
	Namespace      string            `json:"namespace"`
	ID             string            `json:"id"`
	PluginID       string            `json:"plugin_id,omitempty"`
	AccessMode     string            `json:"access_mode,omitempty"`
	AttachmentMode string            `json:"attachment_mode,omitempty"`
	ExternalID     string            `json:"external_id,omitempty"`
	Context        map[string]string `json:"context,omitempty"`
}

// ClaimJSON is abi.ClaimView.
type ClaimJSON struct {
	AllocID        string `json:"alloc_id"`
	NodeID         string `json:"node_id"`
	Mode           string `json:"mode,omitempty"`
	State          string `json:"state,omitempty"`
	Attempts       uint32 `json:"attempts,omitempty"`
	LastErrorCode  uint32 `json:"last_error_code,omitempty"`
	LastErrorKind  string `json:"last_error_kind,omitempty"`
	ExternalNodeID string `json:"external_node_id,omitempty"`
	AccessMode     string `json:"access_mode,omitempty"`
	AttachmentMode string `json:"attachment_mode,omitempty"`
}

// AllocJSON is abi.AllocView.
type AllocJSON struct {
	ID            string `json:"id"`
	ClientStatus  string `json:"client_status"`
	TerminalAgeMs int64  `json:"terminal_age_ms,omitempty"`
}

// NodeJSON is abi.NodeView.
type NodeJSON struct {
	ID            string            `json:"id"`
	Status        string            `json:"status"`
	LastSeenAgeMs int64             `json:"last_seen_age_ms,omitempty"`
	Meta          map[string]string `json:"meta,omitempty"`
	ExternalID    string            `json:"external_id,omitempty"`
}

// PluginJSON is abi.PluginView.
type PluginJSON struct {
	ID               string `json:"id"`
	Provider         string `json:"provider,omitempty"`
	PublishUnpublish bool   `json:"publish_unpublish,omitempty"`
	StageUnstage     bool   `json:"stage_unstage,omitempty"`
}

// View is the request half of a case: exactly one of its parts is set,
// according to the call.
type View struct {
	// Policy is a release policy's view (decide_release).
	Policy *PolicyJSON `json:"policy,omitempty"`
	// Adapter is a CSI adapter's view of one claim at one step (adapt_request).
	Adapter *AdapterJSON `json:"adapter,omitempty"`
	// Classify is a driver error to classify (classify_error).
	Classify *ClassifyJSON `json:"classify,omitempty"`
}

// PolicyJSON is abi.PolicyRequest.
type PolicyJSON struct {
	NowUnixMs int64       `json:"now_unix_ms"`
	Volume    VolumeJSON  `json:"volume"`
	Claims    []ClaimJSON `json:"claims"`
	Allocs    []AllocJSON `json:"allocs"`
	Nodes     []NodeJSON  `json:"nodes"`
}

// AdapterJSON is abi.AdapterRequest.
type AdapterJSON struct {
	Step      string     `json:"step"`
	Claim     ClaimJSON  `json:"claim"`
	Volume    VolumeJSON `json:"volume"`
	Node      NodeJSON   `json:"node"`
	Plugin    PluginJSON `json:"plugin"`
	NowUnixMs int64      `json:"now_unix_ms"`
}

// ClassifyJSON is abi.ClassifyRequest.
type ClassifyJSON struct {
	Step     string `json:"step"`
	Code     uint32 `json:"code"`
	Message  string `json:"message,omitempty"`
	Attempts uint32 `json:"attempts,omitempty"`
	PluginID string `json:"plugin_id,omitempty"`
	VolumeID string `json:"volume_id,omitempty"`
}

// Call names the call a view makes, or an error when not exactly one part
// is set.
func (v *View) Call() (string, error) {
	var calls []string
	if v.Policy != nil {
		calls = append(calls, CallDecide)
	}
	if v.Adapter != nil {
		calls = append(calls, CallAdapt)
	}
	if v.Classify != nil {
		calls = append(calls, CallClassify)
	}
	switch len(calls) {
	case 1:
		return calls[0], nil
	case 0:
		return "", fmt.Errorf("the view has none of \"policy\", \"adapter\" or \"classify\"")
	}
	return "", fmt.Errorf("the view has %d parts (%v); a view makes one call", len(calls), calls)
}

func (v VolumeJSON) abi() abi.VolumeView {
	return abi.VolumeView{Namespace: v.Namespace, ID: v.ID, PluginID: v.PluginID, AccessMode: v.AccessMode,
		AttachmentMode: v.AttachmentMode, ExternalID: v.ExternalID, Context: v.Context}
}

// volumeJSON and nodeJSON copy the maps: a recording redacts them, and
// the request's maps may be the state store's own.
func volumeJSON(v abi.VolumeView) VolumeJSON {
	return VolumeJSON{Namespace: v.Namespace, ID: v.ID, PluginID: v.PluginID, AccessMode: v.AccessMode,
		AttachmentMode: v.AttachmentMode, ExternalID: v.ExternalID, Context: maps.Clone(v.Context)}
}

func (c ClaimJSON) abi() abi.ClaimView {
	return abi.ClaimView{AllocID: c.AllocID, NodeID: c.NodeID, Mode: c.Mode, State: c.State, Attempts: c.Attempts,
		LastErrorCode: c.LastErrorCode, LastErrorKind: c.LastErrorKind, ExternalNodeID: c.ExternalNodeID,
		AccessMode: c.AccessMode, AttachmentMode: c.AttachmentMode}
}

func claimJSON(c abi.ClaimView) ClaimJSON {
	return ClaimJSON{AllocID: c.AllocID, NodeID: c.NodeID, Mode: c.Mode, State: c.State, Attempts: c.Attempts,
		LastErrorCode: c.LastErrorCode, LastErrorKind: c.LastErrorKind, ExternalNodeID: c.ExternalNodeID,
		AccessMode: c.AccessMode, AttachmentMode: c.AttachmentMode}
}

func (n NodeJSON) abi() abi.NodeView {
	return abi.NodeView{ID: n.ID, Status: n.Status, LastSeenAgeMs: n.LastSeenAgeMs, Meta: n.Meta, ExternalID: n.ExternalID}
}

func nodeJSON(n abi.NodeView) NodeJSON {
	return NodeJSON{ID: n.ID, Status: n.Status, LastSeenAgeMs: n.LastSeenAgeMs, Meta: maps.Clone(n.Meta), ExternalID: n.ExternalID}
}

// Request converts the policy view to the wire message.
func (p *PolicyJSON) Request() *abi.PolicyRequest {
	req := &abi.PolicyRequest{NowUnixMs: p.NowUnixMs, Volume: p.Volume.abi()}
	for _, c := range p.Claims {
		req.Claims = append(req.Claims, c.abi())
	}
	for _, a := range p.Allocs {
		req.Allocs = append(req.Allocs, abi.AllocView{ID: a.ID, ClientStatus: a.ClientStatus, TerminalAgeMs: a.TerminalAgeMs})
	}
	for _, n := range p.Nodes {
		req.Nodes = append(req.Nodes, n.abi())
	}
	return req
}

// PolicyView is the JSON form of a policy request.
func PolicyView(req *abi.PolicyRequest) *PolicyJSON {
	p := &PolicyJSON{NowUnixMs: req.NowUnixMs, Volume: volumeJSON(req.Volume),
		Claims: []ClaimJSON{}, Allocs: []AllocJSON{}, Nodes: []NodeJSON{}}
	for _, c := range req.Claims {
		p.Claims = append(p.Claims, claimJSON(c))
	}
	for _, a := range req.Allocs {
		p.Allocs = append(p.Allocs, AllocJSON{ID: a.ID, ClientStatus: a.ClientStatus, TerminalAgeMs: a.TerminalAgeMs})
	}
	for _, n := range req.Nodes {
		p.Nodes = append(p.Nodes, nodeJSON(n))
	}
	return p
}

// Request converts the adapter view to the wire message.
func (a *AdapterJSON) Request() *abi.AdapterRequest {
	return &abi.AdapterRequest{Step: a.Step, Claim: a.Claim.abi(), Volume: a.Volume.abi(), Node: a.Node.abi(),
		Plugin: abi.PluginView{ID: a.Plugin.ID, Provider: a.Plugin.Provider, PublishUnpublish: a.Plugin.PublishUnpublish,
			StageUnstage: a.Plugin.StageUnstage},
		NowUnixMs: a.NowUnixMs}
}

// AdapterView is the JSON form of an adapter request.
func AdapterView(req *abi.AdapterRequest) *AdapterJSON {
	return &AdapterJSON{Step: req.Step, Claim: claimJSON(req.Claim), Volume: volumeJSON(req.Volume), Node: nodeJSON(req.Node),
		Plugin: PluginJSON{ID: req.Plugin.ID, Provider: req.Plugin.Provider, PublishUnpublish: req.Plugin.PublishUnpublish,
			StageUnstage: req.Plugin.StageUnstage},
		NowUnixMs: req.NowUnixMs}
}

// Request converts the classify view to the wire message.
func (c *ClassifyJSON) Request() *abi.ClassifyRequest {
	return &abi.ClassifyRequest{Step: c.Step, Code: c.Code, Message: c.Message, Attempts: c.Attempts,
		PluginID: c.PluginID, VolumeID: c.VolumeID}
}

// Action and outcome names in answers.
var (
	actionNames = map[abi.Action]string{abi.ActionRelease: "release", abi.ActionWait: "wait",
		abi.ActionReleaseSkipNode: "release-skip-node"}
	outcomeNames = map[abi.Outcome]string{abi.OutcomeDone: "done", abi.OutcomeRetry: "retry", abi.OutcomeFatal: "fatal"}
)

func actionName(a abi.Action) string {
	if n, ok := actionNames[a]; ok {
		return n
	}
	return fmt.Sprintf("unknown(%d)", a)
}

func outcomeName(o abi.Outcome) string {
	if n, ok := outcomeNames[o]; ok {
		return n
	}
	return fmt.Sprintf("unknown(%d)", o)
}

// Answer is a module's response in JSON form: one of its parts is set.
type Answer struct {
	Decisions []DecisionJSON `json:"decisions,omitempty"`
	// Adapter answers.
	VolumeID      string            `json:"volume_id,omitempty"`
	NodeID        string            `json:"node_id,omitempty"`
	SecretKeys    []string          `json:"secret_keys,omitempty"`
	VolumeContext map[string]string `json:"volume_context,omitempty"`
	// Classify answers.
	Outcome      string `json:"outcome,omitempty"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

// DecisionJSON is abi.Decision with the action as a word.
type DecisionJSON struct {
	AllocID      string `json:"alloc_id"`
	Action       string `json:"action"`
	RetryAfterMs int64  `json:"retry_after_ms,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

func policyAnswer(r *abi.PolicyResponse) *Answer {
	a := &Answer{Decisions: []DecisionJSON{}}
	for _, d := range r.Decisions {
		a.Decisions = append(a.Decisions, DecisionJSON{AllocID: d.AllocID, Action: actionName(d.Action),
			RetryAfterMs: d.RetryAfterMs, Reason: d.Reason})
	}
	return a
}

func adapterAnswer(r *abi.AdapterResponse) *Answer {
	return &Answer{VolumeID: r.VolumeID, NodeID: r.NodeID, SecretKeys: r.SecretKeys, VolumeContext: r.VolumeContext}
}

func classifyAnswer(r *abi.ClassifyResponse) *Answer {
	return &Answer{Outcome: outcomeName(r.Outcome), RetryAfterMs: r.RetryAfterMs, Reason: r.Reason}
}
