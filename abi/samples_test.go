package abi

// Sample messages shared by the codec tests and the fuzz seed corpus: each is
// fully populated, so a field the codec drops or misnumbers shows up as a
// round-trip difference.

func sampleVolume() VolumeView {
	return VolumeView{
		Namespace: "default", ID: "web-data", PluginID: "gcepd",
		AccessMode: "single-node-writer", AttachmentMode: "file-system",
		ExternalID: "projects/p/zones/z/disks/web-data",
		Context:    map[string]string{"type": "pd-ssd", "replication": "none"},
	}
}

func sampleClaim(i string) ClaimView {
	return ClaimView{
		AllocID: "alloc-" + i, NodeID: "node-" + i, Mode: "write", State: "taken",
		Attempts: 3, LastErrorCode: 14, LastErrorKind: "csi", ExternalNodeID: "projects/p/zones/z/instances/n" + i,
		AccessMode: "single-node-writer", AttachmentMode: "file-system",
	}
}

func sampleNode(i string) NodeView {
	return NodeView{
		ID: "node-" + i, Status: "down", LastSeenAgeMs: 120000,
		Meta:       map[string]string{"gce.project": "p", "gce.zone": "z", "gce.instance": "n" + i},
		ExternalID: "projects/p/zones/z/instances/n" + i,
	}
}

func samplePolicyRequest() *PolicyRequest {
	r := &PolicyRequest{NowUnixMs: 1_790_000_000_000, Volume: sampleVolume()}
	for _, i := range []string{"1", "2", "3", "4", "5", "6", "7", "8"} {
		r.Claims = append(r.Claims, sampleClaim(i))
		r.Allocs = append(r.Allocs, AllocView{ID: "alloc-" + i, ClientStatus: "complete", TerminalAgeMs: 5000})
		r.Nodes = append(r.Nodes, sampleNode(i))
	}
	return r
}

func samplePolicyResponse() *PolicyResponse {
	return &PolicyResponse{Decisions: []Decision{
		{AllocID: "alloc-1", Action: ActionRelease, Reason: "allocation complete"},
		{AllocID: "alloc-2", Action: ActionWait, RetryAfterMs: 25000, Reason: "grace"},
		{AllocID: "alloc-3", Action: ActionReleaseSkipNode, Reason: "node down"},
	}}
}

func sampleAdapterRequest() *AdapterRequest {
	return &AdapterRequest{
		Step: "controller-unpublish", Claim: sampleClaim("1"), Volume: sampleVolume(), Node: sampleNode("1"),
		Plugin:    PluginView{ID: "gcepd", Provider: "pd.csi.storage.gke.io", PublishUnpublish: true, StageUnstage: true},
		NowUnixMs: 1_790_000_000_000,
	}
}

func sampleAdapterResponse() *AdapterResponse {
	return &AdapterResponse{
		VolumeID: "projects/p/zones/z/disks/web-data", NodeID: "projects/p/zones/z/instances/n1",
		SecretKeys: []string{"key", ""}, VolumeContext: map[string]string{"a": "1", "b": ""},
	}
}

// samples lists one populated value of every top-level message, by name.
func samples() map[string]Message {
	return map[string]Message{
		"ConfigureRequest":  &ConfigureRequest{ModuleName: "grace-policy", Config: map[string]string{"grace": "30s", "": "empty key"}},
		"ConfigureResponse": &ConfigureResponse{Version: "1.0.0", AdaptSteps: []string{"controller-publish", "controller-unpublish"}, Error: "bad grace"},
		"PolicyRequest":     samplePolicyRequest(),
		"PolicyResponse":    samplePolicyResponse(),
		"AdapterRequest":    sampleAdapterRequest(),
		"AdapterResponse":   sampleAdapterResponse(),
		"ClassifyRequest":   &ClassifyRequest{Step: "node-unpublish", Code: 5, Message: "disk not found", Attempts: 2, PluginID: "gcepd", VolumeID: "vol"},
		"ClassifyResponse":  &ClassifyResponse{Outcome: OutcomeRetry, RetryAfterMs: 1000, Reason: "aborted", Error: ""},
		"FenceRequest":      sampleFenceRequest(),
		"FenceResponse":     &FenceResponse{NodeID: "node-1", Confirmed: true, Reason: "instance n1 is TERMINATED", RetryAfterMs: 60000},
	}
}

func sampleFenceRequest() *FenceRequest {
	return &FenceRequest{
		NowUnixMs: 1_790_000_000_000, Node: sampleNode("1"),
		Plugin:    PluginView{ID: "gcepd", Provider: "pd.csi.storage.gke.io", PublishUnpublish: true, StageUnstage: true},
		LostAgeMs: 90_000, StatusReason: "missed heartbeats for 30s", Volume: sampleVolume(),
		Claims: []ClaimView{sampleClaim("1"), sampleClaim("2")}, Attempts: 2,
	}
}
