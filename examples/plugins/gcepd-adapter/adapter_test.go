package main

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/volhost/volhost/abi"
)

func TestAdapt(t *testing.T) {
	gceMeta := map[string]string{MetaProject: "proj", MetaZone: "us-central1-a", MetaInstance: "vm-1"}
	vol := abi.VolumeView{Namespace: "default", ID: "web", ExternalID: "projects/proj/zones/us-central1-a/disks/web", Context: map[string]string{"k": "v"}}
	tests := []struct {
		name     string
		step     string
		volume   abi.VolumeView
		node     abi.NodeView
		claim    abi.ClaimView
		wantNode string
		wantCtx  map[string]string
		wantErr  string
	}{
		{"meta with instance", "controller-unpublish", vol, abi.NodeView{ID: "n1", Meta: gceMeta, ExternalID: "other"}, abi.ClaimView{},
			"projects/proj/zones/us-central1-a/instances/vm-1", nil, ""},
		{"meta without instance uses node ID", "controller-unpublish", vol,
			abi.NodeView{ID: "n1", Meta: map[string]string{MetaProject: "p", MetaZone: "z"}}, abi.ClaimView{},
			"projects/p/zones/z/instances/n1", nil, ""},
		{"node gone: claim's node ID", "controller-unpublish", vol,
			abi.NodeView{Meta: map[string]string{MetaProject: "p", MetaZone: "z"}}, abi.ClaimView{NodeID: "n7"},
			"projects/p/zones/z/instances/n7", nil, ""},
		{"no zone: plugin's external ID", "node-unpublish", vol,
			abi.NodeView{ID: "n1", Meta: map[string]string{MetaProject: "p"}, ExternalID: "projects/x/zones/y/instances/z"}, abi.ClaimView{},
			"projects/x/zones/y/instances/z", nil, ""},
		{"no meta, no node: claim's external node ID", "controller-unpublish", vol, abi.NodeView{}, abi.ClaimView{ExternalNodeID: "projects/a/zones/b/instances/c"},
			"projects/a/zones/b/instances/c", nil, ""},
		{"publish carries volume context", "node-publish", vol, abi.NodeView{ExternalID: "e"}, abi.ClaimView{},
			"e", map[string]string{"k": "v"}, ""},
		{"no node ID at all", "controller-unpublish", vol, abi.NodeView{ID: "n1"}, abi.ClaimView{NodeID: "n1"}, "", nil, `no external node ID for node "n1"`},
		{"no volume external ID", "controller-unpublish", abi.VolumeView{Namespace: "default", ID: "web"}, abi.NodeView{ExternalID: "e"}, abi.ClaimView{}, "", nil, "volume default/web has no external ID"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := adapt(&abi.AdapterRequest{Step: tc.step, Volume: tc.volume, Node: tc.node, Claim: tc.claim})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ~%q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.VolumeID != tc.volume.ExternalID || resp.NodeID != tc.wantNode || !reflect.DeepEqual(resp.VolumeContext, tc.wantCtx) || len(resp.SecretKeys) != 0 {
				t.Fatalf("adapt = %+v, want node %q ctx %v", resp, tc.wantNode, tc.wantCtx)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		step string
		code uint32
		want abi.Outcome
	}{
		// Never DONE for a failed step: the host would refuse it as unsafe.
		{"node-unpublish", codeNotFound, abi.OutcomeRetry},
		{"node-unstage", codeNotFound, abi.OutcomeRetry},
		{"controller-unpublish", codeNotFound, abi.OutcomeRetry},
		{"controller-publish", codeNotFound, abi.OutcomeRetry},
		{"node-stage", codeNotFound, abi.OutcomeRetry},
		{"controller-unpublish", codeAborted, abi.OutcomeRetry},
		{"controller-unpublish", codeUnavailable, abi.OutcomeRetry},
		{"controller-unpublish", codeDeadlineExceeded, abi.OutcomeRetry},
		{"controller-unpublish", codeResourceExhausted, abi.OutcomeRetry},
		{"controller-unpublish", codeCanceled, abi.OutcomeRetry},
		{"controller-unpublish", codeInternal, abi.OutcomeRetry},
		{"controller-unpublish", codeUnimplemented, abi.OutcomeFatal},
		{"node-unpublish", codeInvalidArgument, abi.OutcomeFatal},
		{"node-unpublish", codePermissionDenied, abi.OutcomeFatal},
		{"controller-unpublish", codeFailedPrecondition, abi.OutcomeRetry},
		{"controller-unpublish", 99, abi.OutcomeRetry},
	}
	for _, tc := range tests {
		t.Run(tc.step+"/"+codeName(tc.code), func(t *testing.T) {
			resp, err := classify(&abi.ClassifyRequest{Step: tc.step, Code: tc.code})
			if err != nil || resp.Outcome != tc.want || resp.RetryAfterMs != 0 || !strings.Contains(resp.Reason, tc.step) {
				t.Fatalf("classify = %+v, %v; want outcome %d", resp, err, tc.want)
			}
		})
	}
	if _, err := classify(&abi.ClassifyRequest{Code: codeOK}); err == nil {
		t.Fatal("code OK must be refused")
	}
}

func TestConfigure(t *testing.T) {
	if v, err := configure(nil); v != version || err != nil {
		t.Fatalf("configure(nil) = %q, %v", v, err)
	}
	if _, err := configure(map[string]string{"zone": "z"}); err == nil || !strings.Contains(err.Error(), `"zone"`) {
		t.Fatalf("configure with a key: %v", err)
	}
}

// The steps left out of adaptSteps must be ones where this adapter's answer
// is the spec's default for every field the step's CSI request carries
// (NodeUnpublish and NodeUnstage take only the volume ID): the host skips
// the call for them, so anything else this adapter did there would be lost.
func TestAdaptStepsCoverEveryChange(t *testing.T) {
	req := abi.AdapterRequest{
		Volume: abi.VolumeView{Namespace: "default", ID: "web", ExternalID: "projects/p/zones/z/disks/web", Context: map[string]string{"k": "v"}},
		Node:   abi.NodeView{ID: "n1", Meta: map[string]string{MetaProject: "p", MetaZone: "z"}, ExternalID: "other"},
		Claim:  abi.ClaimView{NodeID: "n1"},
	}
	for _, step := range abi.AdapterSteps {
		req.Step = step
		resp, err := adapt(&req)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		declared := slices.Contains(adaptSteps, step)
		switch {
		case declared && resp.NodeID != "projects/p/zones/z/instances/n1":
			t.Errorf("%s is declared but its node ID is %q", step, resp.NodeID)
		case !declared && !strings.HasPrefix(step, "node-"):
			t.Errorf("%s is left to the host but is not a node step", step)
		case !declared && resp.VolumeID != req.Volume.ExternalID:
			t.Errorf("%s is left to the host, whose volume ID would be %q, but the adapter answers %q", step, req.Volume.ExternalID, resp.VolumeID)
		}
	}
	for _, s := range adaptSteps {
		if !slices.Contains(abi.AdapterSteps, s) {
			t.Errorf("adaptSteps names %q, not an abi.AdapterSteps step", s)
		}
	}
}
