// Package oldcodec is the hand-written codec that abi/internal/gen replaced, kept only
// while TestGeneratedMatchesHandWritten compares the two.
package oldcodec

// The wire messages. Field numbers are fixed in volhost.proto beside this
// file (protobuf wire format); the codec is hand-written over protowire so
// guests need no reflection. Times travel as Unix milliseconds and durations
// as milliseconds, so a decision is a pure function of its request.
//
// Every response carries Error: a non-empty Error means the guest failed to
// decide (a recovered panic, a request it cannot handle) and the host treats
// the call as a fault.

// ConfigureRequest reaches each instance once, before any decision.
type ConfigureRequest struct {
	ModuleName string            // field 1
	Config     map[string]string // field 2: the manifest's config block
}

// ConfigureResponse acknowledges a ConfigureRequest.
type ConfigureResponse struct {
	Version string // field 1: the module's own version string, shown in status and logs
	// AdaptSteps (field 2, csi-adapter only) names the steps whose CSI
	// requests volhost_adapt_request changes; for any other step the host
	// builds the CSI spec's default request without calling the module.
	// Empty means every step (ABI.md section 4).
	AdaptSteps []string
	Error      string // field 15
}

// VolumeView is the part of a volume a module sees.
type VolumeView struct {
	Namespace      string            // 1
	ID             string            // 2
	PluginID       string            // 3
	AccessMode     string            // 4
	AttachmentMode string            // 5
	ExternalID     string            // 6
	Context        map[string]string // 7
}

// ClaimView is the part of a claim a module sees.
type ClaimView struct {
	AllocID        string // 1
	NodeID         string // 2
	Mode           string // 3: read | write
	State          string // 4: taken | node-detached | controller-detached | ready-to-free
	Attempts       uint32 // 5
	LastErrorCode  uint32 // 6: gRPC code of the last CSI error, 0 for none
	LastErrorKind  string // 7: csi | module | precondition | ""
	ExternalNodeID string // 8
	AccessMode     string // 9
	AttachmentMode string // 10
}

// AllocView is an allocation's client status.
type AllocView struct {
	ID            string // 1
	ClientStatus  string // 2: pending | running | complete | failed | lost | gone
	TerminalAgeMs int64  // 3: ms since the allocation became terminal (0 when not terminal or unknown)
}

// NodeView is a node's health.
type NodeView struct {
	ID            string            // 1
	Status        string            // 2: ready | down | gone
	LastSeenAgeMs int64             // 3
	Meta          map[string]string // 4 (adapter requests only; empty in policy requests)
	ExternalID    string            // 5: NodeGetInfo's node ID for the volume's plugin
}

// PolicyRequest asks a release policy to judge the claims of one volume.
type PolicyRequest struct {
	NowUnixMs int64       // 1
	Volume    VolumeView  // 2
	Claims    []ClaimView // 3
	Allocs    []AllocView // 4
	Nodes     []NodeView  // 5
}

// Action is a release policy's answer for one claim.
type Action uint32

const (
	ActionUnspecified Action = 0
	// ActionRelease: run the release steps for this claim now.
	ActionRelease Action = 1
	// ActionWait: leave the claim; look again after RetryAfterMs.
	ActionWait Action = 2
	// ActionReleaseSkipNode: release, but skip the node step (node down or gone).
	ActionReleaseSkipNode Action = 3
)

// Decision is one claim's verdict.
type Decision struct {
	AllocID      string // 1
	Action       Action // 2
	RetryAfterMs int64  // 3
	Reason       string // 4
}

// PolicyResponse holds at most one decision per claim of the request.
type PolicyResponse struct {
	Decisions []Decision // 1
	Error     string     // 15
}

// PluginView is a CSI plugin's relevant capabilities.
type PluginView struct {
	ID               string // 1
	Provider         string // 2
	PublishUnpublish bool   // 3: controller PUBLISH_UNPUBLISH_VOLUME
	StageUnstage     bool   // 4: node STAGE_UNSTAGE_VOLUME
}

// AdapterRequest asks a CSI adapter how a claim maps onto a driver's requests.
type AdapterRequest struct {
	Step      string     // 1: one of AdapterSteps
	Claim     ClaimView  // 2
	Volume    VolumeView // 3
	Node      NodeView   // 4
	Plugin    PluginView // 5
	NowUnixMs int64      // 6
}

// AdapterResponse gives the CSI request fields. Secrets never reach a module:
// it names the keys of the volume's secrets to send, the host fills the values.
type AdapterResponse struct {
	VolumeID      string            // 1: the driver's volume ID
	NodeID        string            // 2: the driver's node ID; the host refuses an empty one
	SecretKeys    []string          // 3
	VolumeContext map[string]string // 4
	Error         string            // 15
}

// Outcome classifies a CSI error.
type Outcome uint32

const (
	OutcomeUnspecified Outcome = 0
	// OutcomeDone: the step counts as done (e.g. NotFound on unpublish: nothing attached).
	OutcomeDone Outcome = 1
	// OutcomeRetry: try again after RetryAfterMs (0: the host's backoff decides).
	OutcomeRetry Outcome = 2
	// OutcomeFatal: retrying will not help; the volume becomes stuck.
	OutcomeFatal Outcome = 3
)

// ClassifyRequest asks what a driver's error means.
type ClassifyRequest struct {
	Step     string // 1
	Code     uint32 // 2: gRPC status code
	Message  string // 3
	Attempts uint32 // 4
	PluginID string // 5
	VolumeID string // 6
}

// ClassifyResponse is the adapter's verdict on a CSI error.
type ClassifyResponse struct {
	Outcome      Outcome // 1
	RetryAfterMs int64   // 2
	Reason       string  // 3
	Error        string  // 15
}
