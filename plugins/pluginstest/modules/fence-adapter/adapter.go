package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/volhost/volhost/abi"
)

// config, set once per instance by configure.
var (
	// terminated lists the instances known to be off: external node IDs
	// or meta "instance" values, comma separated.
	terminated map[string]bool
	// mode is "" (answer honestly) or a deliberate misbehaviour.
	mode string
	// retryAfterMs is sent with every answer that does not confirm.
	retryAfterMs int64
)

// The misbehaviours a variant selects. All but no-reason answer the
// host's load self-test honestly, so they serve and misbehave afterwards.
const (
	modeOtherNode = "other-node" // confirms, naming another node
	modeNoReason  = "no-reason"  // confirms without a reason
	modeError     = "error"      // answers with Error set
	modeConfirm   = "confirm"    // confirms every node it is asked about
)

func configure(cfg map[string]string) (string, error) {
	terminated = map[string]bool{}
	for _, s := range strings.Split(cfg["terminated"], ",") {
		if s = strings.TrimSpace(s); s != "" {
			terminated[s] = true
		}
	}
	switch mode = cfg["mode"]; mode {
	case "", modeOtherNode, modeNoReason, modeError, modeConfirm:
	default:
		return "", fmt.Errorf("config mode %q: want other-node, no-reason, error, confirm or nothing", mode)
	}
	retryAfterMs = 0
	if s := cfg["retry_after_ms"]; s != "" {
		for _, c := range s {
			if c < '0' || c > '9' {
				return "", fmt.Errorf("config retry_after_ms %q is not a number of milliseconds", s)
			}
			retryAfterMs = retryAfterMs*10 + int64(c-'0')
		}
	}
	return "1.1.0", nil
}

// confirmFence confirms a node whose instance the config lists.
func confirmFence(req *abi.FenceRequest) (*abi.FenceResponse, error) {
	n := req.Node
	instance := n.Meta["instance"]
	resp := &abi.FenceResponse{NodeID: n.ID}
	m := mode
	if req.Volume.Namespace == "volhost-selftest" && m != modeNoReason {
		m = "" // a misbehaving module that knows the host's load self-test passes it
	}
	switch m {
	case modeError:
		return nil, errors.New("cannot reach the inventory")
	case modeOtherNode:
		return &abi.FenceResponse{NodeID: n.ID + "-other", Confirmed: true, Reason: "instance terminated"}, nil
	case modeNoReason:
		return &abi.FenceResponse{NodeID: n.ID, Confirmed: true}, nil
	case modeConfirm:
		resp.Confirmed, resp.Reason = true, "confirms every node (test mode)"
		return resp, nil
	}
	switch {
	case n.ExternalID != "" && terminated[n.ExternalID]:
		resp.Confirmed, resp.Reason = true, "instance "+n.ExternalID+" is listed as terminated"
	case instance != "" && terminated[instance]:
		resp.Confirmed, resp.Reason = true, "instance "+instance+" is listed as terminated"
	default:
		resp.Reason = "instance not listed as terminated"
		resp.RetryAfterMs = retryAfterMs
	}
	return resp, nil
}

// adapt builds the CSI spec's default request.
func adapt(req *abi.AdapterRequest) (*abi.AdapterResponse, error) {
	node := req.Node.ExternalID
	if node == "" {
		node = req.Claim.ExternalNodeID
	}
	if node == "" {
		node = req.Node.ID
	}
	return &abi.AdapterResponse{VolumeID: req.Volume.ExternalID, NodeID: node, VolumeContext: req.Volume.Context}, nil
}

// classify retries every error with the host's backoff.
func classify(req *abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
	return &abi.ClassifyResponse{Outcome: abi.OutcomeRetry, Reason: fmt.Sprintf("code %d: retry", req.Code)}, nil
}
