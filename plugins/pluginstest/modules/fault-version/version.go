package main

import "github.com/volhost/volhost/abi"

// wrongVersion is the version marker this module exports instead of abi.Version.
const wrongVersion = 99

// configure answers a ConfigureRequest.
func configure(in []byte) []byte {
	var req abi.ConfigureRequest
	resp := abi.ConfigureResponse{Version: "1.0.0"}
	if err := req.Unmarshal(in); err != nil {
		resp.Error = err.Error()
	}
	return resp.MarshalAppend(nil)
}

// decide answers a PolicyRequest with a wait for every claim.
func decide(in []byte) []byte {
	var req abi.PolicyRequest
	var resp abi.PolicyResponse
	if err := req.Unmarshal(in); err != nil {
		resp.Error = err.Error()
	}
	for _, c := range req.Claims {
		resp.Decisions = append(resp.Decisions, abi.Decision{AllocID: c.AllocID, Action: abi.ActionWait, Reason: "fault-version"})
	}
	return resp.MarshalAppend(nil)
}
