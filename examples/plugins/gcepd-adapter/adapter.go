package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/volhost/volhost/abi"
)

// version is reported to the host in the configure response.
const version = "1.0.0"

// Node metadata keys the adapter reads.
const (
	MetaProject  = "gce.project"
	MetaZone     = "gce.zone"
	MetaInstance = "gce.instance"
)

// gRPC status codes (google.golang.org/grpc/codes), spelled out so the guest
// does not link grpc.
const (
	codeOK                 = 0
	codeCanceled           = 1
	codeUnknown            = 2
	codeInvalidArgument    = 3
	codeDeadlineExceeded   = 4
	codeNotFound           = 5
	codeAlreadyExists      = 6
	codePermissionDenied   = 7
	codeResourceExhausted  = 8
	codeFailedPrecondition = 9
	codeAborted            = 10
	codeOutOfRange         = 11
	codeUnimplemented      = 12
	codeInternal           = 13
	codeUnavailable        = 14
	codeDataLoss           = 15
	codeUnauthenticated    = 16
)

var codeNames = [...]string{"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
	"Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"}

func codeName(c uint32) string {
	if int(c) < len(codeNames) {
		return codeNames[c]
	}
	return fmt.Sprintf("Code(%d)", c)
}

// configure takes no settings; a key is a manifest mistake and is refused.
func configure(cfg map[string]string) (string, error) {
	if len(cfg) > 0 {
		keys := make([]string, 0, len(cfg))
		for k := range cfg {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return version, fmt.Errorf("gcepd-adapter takes no config, got keys %q", keys)
	}
	return version, nil
}

// adapt maps a claim onto the driver's request fields. The volume ID is the
// volume's external ID (projects/P/zones/Z/disks/D). The node ID is built
// from node metadata when gce.project and gce.zone are set (instance from
// gce.instance, else the node's ID); otherwise it is the ID the node's
// plugin reported (NodeGetInfo), then the one recorded on the claim, which
// survives the node being gone (hashicorp/nomad#25349: "missing external node ID").
// The driver rejects an empty node ID, so no ID is an error, not a guess.
// adaptSteps are the steps whose CSI requests this adapter changes: only the
// controller calls carry a node ID, and the driver wants its own
// projects/P/zones/Z/instances/N form there. NodeUnpublish and NodeUnstage
// carry the volume ID alone, which is the spec's default (the external ID),
// so the host builds those without a Wasm call (ABI.md section 4).
var adaptSteps = []string{abi.StepControllerPublish, abi.StepControllerUnpublish}

func adapt(req *abi.AdapterRequest) (*abi.AdapterResponse, error) {
	if req.Volume.ExternalID == "" {
		return nil, fmt.Errorf("volume %s/%s has no external ID", req.Volume.Namespace, req.Volume.ID)
	}
	nodeID := ""
	// Each lookup is read once: a map lookup costs a Go guest a loop per
	// key byte, and every loop is a wazero exit under a call timeout.
	meta := req.Node.Meta
	if project, zone := meta[MetaProject], meta[MetaZone]; project != "" && zone != "" {
		instance := meta[MetaInstance]
		if instance == "" {
			instance = req.Node.ID
		}
		if instance == "" {
			instance = req.Claim.NodeID
		}
		if instance != "" {
			nodeID = "projects/" + project + "/zones/" + zone + "/instances/" + instance
		}
	}
	if nodeID == "" {
		nodeID = req.Node.ExternalID
	}
	if nodeID == "" {
		nodeID = req.Claim.ExternalNodeID
	}
	if nodeID == "" {
		return nil, fmt.Errorf("no external node ID for node %q: set node meta %s and %s, or register the node's plugin",
			req.Claim.NodeID, MetaProject, MetaZone)
	}
	resp := &abi.AdapterResponse{VolumeID: req.Volume.ExternalID, NodeID: nodeID}
	if len(req.Volume.Context) > 0 && !releaseStep(req.Step) {
		// Stage and publish carry the volume context; release steps have none.
		resp.VolumeContext = req.Volume.Context
	}
	return resp, nil
}

// releaseStep reports whether step detaches (unpublish or unstage).
func releaseStep(step string) bool {
	return strings.HasSuffix(step, "-unpublish") || strings.HasSuffix(step, "-unstage")
}

var errNotAnError = errors.New("code OK is not an error")

// classify says what a driver error means:
//   - NotFound at an unpublish or unstage step: retry, saying the disk or
//     instance may be gone. A module may never call a failed detach done
//     (the host refuses it as unsafe: a disk could stay attached under the
//     next writer); if the instance really is gone, the claim becomes stuck
//     and `volume deregister -force` records the leftover;
//   - NotFound at a publish or stage step: retry (the spec: verify, then retry
//     with backoff);
//   - Unimplemented, InvalidArgument, PermissionDenied: fatal, retrying the
//     same request cannot help (the spec: UNIMPLEMENTED, never retry);
//   - Aborted (an operation is pending), Unavailable, DeadlineExceeded,
//     ResourceExhausted, Canceled, Internal (may still be in progress, like
//     Kubernetes' external-attacher): retry after the host's backoff;
//   - any other code: retry; the host's attempt limit marks the volume stuck.
func classify(req *abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
	name := codeName(req.Code)
	switch req.Code {
	case codeOK:
		return nil, errNotAnError
	case codeNotFound:
		if releaseStep(req.Step) {
			return &abi.ClassifyResponse{Outcome: abi.OutcomeRetry, Reason: req.Step + ": NotFound, the disk or instance may be gone; force-deregister if so"}, nil
		}
		return &abi.ClassifyResponse{Outcome: abi.OutcomeRetry, Reason: req.Step + ": NotFound, verify and retry"}, nil
	case codeUnimplemented, codeInvalidArgument, codePermissionDenied:
		return &abi.ClassifyResponse{Outcome: abi.OutcomeFatal, Reason: req.Step + ": " + name + " will not succeed on retry"}, nil
	case codeAborted, codeUnavailable, codeDeadlineExceeded, codeResourceExhausted, codeCanceled, codeInternal:
		return &abi.ClassifyResponse{Outcome: abi.OutcomeRetry, Reason: req.Step + ": " + name + ", may still be in progress"}, nil
	}
	return &abi.ClassifyResponse{Outcome: abi.OutcomeRetry, Reason: req.Step + ": " + name}, nil
}
