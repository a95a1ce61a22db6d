package watcher

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/watcher/attach"
)

// funcAdapter lets a test script each adapter call.
type funcAdapter struct {
	adapt    func(req *abi.AdapterRequest) (*abi.AdapterResponse, error)
	classify func(req *abi.ClassifyRequest) (*abi.ClassifyResponse, error)
}

func (a funcAdapter) AdaptRequest(ctx context.Context, req *abi.AdapterRequest) (*abi.AdapterResponse, error) {
	if a.adapt == nil {
		return SpecAdapter{}.AdaptRequest(ctx, req)
	}
	return a.adapt(req)
}

func (a funcAdapter) ClassifyError(ctx context.Context, req *abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
	if a.classify == nil {
		return SpecAdapter{}.ClassifyError(ctx, req)
	}
	return a.classify(req)
}

// TestAdapterFaults: adapter faults fail closed with the module named; the
// secrets the adapter names are the ones sent; a driver error the adapter
// cannot classify keeps its gRPC code next to the module fault.
func TestAdapterFaults(t *testing.T) {
	adaptWith := func(resp *abi.AdapterResponse, err error) func(*abi.AdapterRequest) (*abi.AdapterResponse, error) {
		return func(req *abi.AdapterRequest) (*abi.AdapterResponse, error) {
			if req.Step != StepControllerUnpublish {
				return SpecAdapter{}.AdaptRequest(context.Background(), req)
			}
			return resp, err
		}
	}
	for _, tc := range []struct {
		name      string
		adapter   funcAdapter
		ctlErr    error
		wantCalls int
		released  bool
		check     func(t *testing.T, e *structs.ClaimError, calls []csiCall)
	}{
		{name: "adapt-trap", adapter: funcAdapter{adapt: adaptWith(nil, fakeFault{})},
			check: func(t *testing.T, e *structs.ClaimError, _ []csiCall) {
				if e.Kind != structs.ErrorModule || e.Step != StepAdapter || e.Fault != "trap" || e.Module != "trap-policy" || e.ModuleVersion != "1.2.3" {
					t.Fatalf("last error = %+v", e)
				}
			}},
		{name: "guest-error", adapter: funcAdapter{adapt: adaptWith(&abi.AdapterResponse{Error: "cannot map"}, nil)},
			check: func(t *testing.T, e *structs.ClaimError, _ []csiCall) {
				if e.Kind != structs.ErrorModule || e.Fault != attach.FaultBadOutput || !strings.Contains(e.Message, "cannot map") {
					t.Fatalf("last error = %+v", e)
				}
			}},
		{name: "empty-volume-id", adapter: funcAdapter{adapt: adaptWith(&abi.AdapterResponse{NodeID: "x"}, nil)},
			check: func(t *testing.T, e *structs.ClaimError, _ []csiCall) {
				if e.Fault != attach.FaultBadOutput {
					t.Fatalf("last error = %+v", e)
				}
			}},
		{name: "empty-node-id", adapter: funcAdapter{adapt: adaptWith(&abi.AdapterResponse{VolumeID: "vol-v1"}, nil)},
			check: func(t *testing.T, e *structs.ClaimError, _ []csiCall) {
				if e.Kind != structs.ErrorPrecondition || e.Step != StepControllerUnpublish {
					t.Fatalf("last error = %+v", e)
				}
			}},
		{name: "unknown-secret", adapter: funcAdapter{adapt: adaptWith(&abi.AdapterResponse{VolumeID: "vol-v1", NodeID: "ext-" + testNode, SecretKeys: []string{"nope"}}, nil)},
			check: func(t *testing.T, e *structs.ClaimError, _ []csiCall) {
				if e.Fault != attach.FaultBadOutput || !strings.Contains(e.Message, "nope") {
					t.Fatalf("last error = %+v", e)
				}
			}},
		{name: "named-secrets", adapter: funcAdapter{adapt: adaptWith(&abi.AdapterResponse{VolumeID: "vol-v1", NodeID: "ext-" + testNode, SecretKeys: []string{}}, nil)},
			wantCalls: 1, released: true,
			check: func(t *testing.T, _ *structs.ClaimError, calls []csiCall) {
				if c := calls[0]; c.VolumeID != "vol-v1" || c.NodeID != "ext-"+testNode || len(c.Secrets) != 0 {
					t.Fatalf("call = %+v, want adapter's IDs and no secrets", c)
				}
			}},
		// Module answers are bounded: IDs the host cannot verify are faults, no call.
		{name: "foreign-volume-id", adapter: funcAdapter{adapt: adaptWith(&abi.AdapterResponse{VolumeID: "someone-elses-disk", NodeID: "ext-" + testNode}, nil)},
			check: func(t *testing.T, e *structs.ClaimError, _ []csiCall) {
				if e.Fault != attach.FaultUnsafe || !strings.Contains(e.Message, `"someone-elses-disk"`) {
					t.Fatalf("last error = %+v", e)
				}
			}},
		{name: "foreign-node-id", adapter: funcAdapter{adapt: adaptWith(&abi.AdapterResponse{VolumeID: "vol-v1", NodeID: "ext-other"}, nil)},
			check: func(t *testing.T, e *structs.ClaimError, _ []csiCall) {
				if e.Fault != attach.FaultUnsafe || !strings.Contains(e.Message, `whose external node ID is "ext-`+testNode+`"`) {
					t.Fatalf("last error = %+v", e)
				}
			}},
		{name: "classify-fails", ctlErr: status.Error(codes.Aborted, "busy"), wantCalls: 1,
			adapter: funcAdapter{classify: func(*abi.ClassifyRequest) (*abi.ClassifyResponse, error) { return nil, errors.New("oops") }},
			check: func(t *testing.T, e *structs.ClaimError, _ []csiCall) {
				if e.Kind != structs.ErrorModule || e.Code != uint32(codes.Aborted) || e.CodeName != "Aborted" || !strings.Contains(e.Message, "busy") {
					t.Fatalf("last error = %+v", e)
				}
			}},
		{name: "classify-unknown-outcome", ctlErr: status.Error(codes.Aborted, "busy"), wantCalls: 1,
			adapter: funcAdapter{classify: func(*abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
				return &abi.ClassifyResponse{Outcome: 9}, nil
			}},
			check: func(t *testing.T, e *structs.ClaimError, _ []csiCall) {
				if e.Fault != attach.FaultBadOutput {
					t.Fatalf("last error = %+v", e)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Config{}, testModules{adapter: tc.adapter})
			f.store.putAlloc("a1", testNode, structs.AllocComplete)
			f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimNodeDetached)))
			f.csi.setScript(mCtlUnpublish, tc.ctlErr)
			if _, err := f.w.assess(context.Background(), ref("v1")); err != nil {
				t.Fatal(err)
			}
			calls := f.csi.callList()
			if len(calls) != tc.wantCalls {
				t.Fatalf("%d CSI calls, want %d: %s", len(calls), tc.wantCalls, fmtCalls(calls))
			}
			c := f.store.claim(ref("v1"), "a1")
			if tc.released != (c == nil) {
				t.Fatalf("released = %v, want %v", c == nil, tc.released)
			}
			var e *structs.ClaimError
			if c != nil {
				if c.State != structs.ClaimNodeDetached || c.Attempts != 1 || c.LastError == nil {
					t.Fatalf("claim = %s attempts %d err %+v, want a recorded failure", c.State, c.Attempts, c.LastError)
				}
				e = c.LastError
			}
			tc.check(t, e, calls)
		})
	}
}

// TestStoreWriteFailure: a failed log write aborts the pass with an error
// (the volume is retried) and no CSI call follows it.
func TestStoreWriteFailure(t *testing.T) {
	f := newFixture(t, Config{}, nil)
	f.store.putAlloc("a1", testNode, structs.AllocComplete)
	f.store.putVolume(newVolume("v1", newClaim("a1", testNode, structs.ClaimTaken)))
	f.store.failWrites = structs.ErrNoLeader
	_, err := f.w.assess(context.Background(), ref("v1"))
	if !errors.Is(err, structs.ErrNoLeader) {
		t.Fatalf("assess = %v, want the write error", err)
	}
	// NodeUnpublish, then the checkpoint of its success failed: no
	// NodeUnstage follows an unrecorded unpublish (exactly one NodeUnpublish
	// per claim: a retry must know whether the target was unpublished).
	if got := f.csi.methods(); !slices.Equal(got, []string{mNodeUnpublish}) {
		t.Fatalf("calls = %v, want NodeUnpublish only", got)
	}
	if c := f.store.claim(ref("v1"), "a1"); c.State != structs.ClaimTaken {
		t.Fatalf("state = %s", c.State)
	}
}
