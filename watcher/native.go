package watcher

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// Names of the built-in implementations, as they appear in claim errors.
const (
	NativePolicyName  = "native-default-policy"
	NativeAdapterName = "native-spec-adapter"
	NativeVersion     = "builtin"
)

// DefaultPolicy is the built-in release policy. The Wasm default-policy
// example must decide exactly like it (TestDifferentialDefaultPolicy).
//
// For each claim: an allocation pending or running waits (no timed retry:
// its status change wakes the volume); a terminal or gone allocation is
// released, skipping the node step when the claim is still taken and its
// node is down or gone (the reference system never frees claims on dead
// nodes: hashicorp/nomad#12346).
type DefaultPolicy struct{}

var _ Policy = DefaultPolicy{}

// ModuleName implements attach.Named.
func (DefaultPolicy) ModuleName() string { return NativePolicyName }

// ModuleVersion implements attach.Named.
func (DefaultPolicy) ModuleVersion() string { return NativeVersion }

// DecideRelease implements Policy. The rules live in abi/defaultpolicy,
// which the default-policy example module compiles too, so the native and
// Wasm defaults cannot drift; the differential test checks the Wasm path
// (codec, SDK, runtime) decides identically.
func (DefaultPolicy) DecideRelease(_ context.Context, req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
	return defaultpolicy.Decide(req), nil
}

// SpecAdapter is the built-in CSI adapter: it maps claims onto requests the
// way the CSI spec describes and classifies errors by the spec's rules.
//
// AdaptRequest returns nil SecretKeys, which the watcher reads as "send all
// of the volume's secrets" (the request carries no secret names, and a
// spec-conformant driver ignores keys it does not need).
type SpecAdapter struct{}

var _ attach.Adapter = SpecAdapter{}

// ModuleName implements attach.Named.
func (SpecAdapter) ModuleName() string { return NativeAdapterName }

// ModuleVersion implements attach.Named.
func (SpecAdapter) ModuleVersion() string { return NativeVersion }

// AdaptRequest implements Adapter. The node ID is the one recorded on the
// claim at publish time, which every release step of the claim names: the
// attachment is there, whatever the node reports now (a replaced instance,
// or an agent reporting another machine's ID, would get the detach of an
// attachment it does not have). At publish the claim has none yet, and a
// claim published before the field existed may have none: then the one
// the node plugin reported through NodeGetInfo.
func (SpecAdapter) AdaptRequest(_ context.Context, req *abi.AdapterRequest) (*abi.AdapterResponse, error) {
	nodeID := req.Claim.ExternalNodeID
	if nodeID == "" {
		nodeID = req.Node.ExternalID
	}
	return &abi.AdapterResponse{
		VolumeID:      req.Volume.ExternalID,
		NodeID:        nodeID,
		VolumeContext: req.Volume.Context,
	}, nil
}

// ClassifyError implements Adapter, following the CSI spec's error tables:
// NOT_FOUND "verify and retry with exponential backoff", ABORTED "an
// operation is pending, retry with backoff", transient transport codes are
// retried, and UNIMPLEMENTED or request errors are never retried (CSI spec,
// "Error Scheme"; Kubernetes' external-attacher treats the same transient
// set as "may still be in progress").
func (SpecAdapter) ClassifyError(_ context.Context, req *abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
	switch codes.Code(req.Code) {
	case codes.OK:
		return &abi.ClassifyResponse{Outcome: abi.OutcomeDone, Reason: "ok"}, nil
	case codes.NotFound:
		return &abi.ClassifyResponse{Outcome: abi.OutcomeRetry, Reason: "not found: verify and retry"}, nil
	case codes.Aborted, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled,
		codes.ResourceExhausted, codes.Internal, codes.Unknown, codes.FailedPrecondition:
		return &abi.ClassifyResponse{Outcome: abi.OutcomeRetry, Reason: codes.Code(req.Code).String() + ": retry"}, nil
	case codes.Unimplemented, codes.InvalidArgument, codes.PermissionDenied, codes.Unauthenticated:
		return &abi.ClassifyResponse{Outcome: abi.OutcomeFatal, Reason: codes.Code(req.Code).String() + ": retrying will not help"}, nil
	}
	// Codes the spec does not list for the release RPCs: retry, since
	// giving up would strand the claim; stuck detection makes it visible.
	return &abi.ClassifyResponse{Outcome: abi.OutcomeRetry, Reason: fmt.Sprintf("code %d: retry", req.Code)}, nil
}

// nativeModules serves the built-ins for every volume (Deps.Modules == nil).
type nativeModules struct{}

func (nativeModules) PolicyFor(*structs.Volume) Policy          { return DefaultPolicy{} }
func (nativeModules) AdapterFor(*structs.Volume) attach.Adapter { return SpecAdapter{} }

// NativeModules returns the Modules that serve DefaultPolicy and SpecAdapter
// for every volume: the fallback when no Wasm module matches.
func NativeModules() Modules { return nativeModules{} }
