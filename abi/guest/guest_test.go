package guest

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/abi/defaultpolicy"
)

func policyRequest() []byte {
	req := abi.PolicyRequest{
		NowUnixMs: 1000,
		Claims:    []abi.ClaimView{{AllocID: "a1", NodeID: "n1", State: "taken"}},
		Allocs:    []abi.AllocView{{ID: "a1", ClientStatus: "complete"}},
	}
	return req.MarshalAppend(nil)
}

func releaseAll(req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
	resp := &abi.PolicyResponse{}
	for _, c := range req.Claims {
		resp.Decisions = append(resp.Decisions, abi.Decision{AllocID: c.AllocID, Action: abi.ActionRelease, Reason: "ok"})
	}
	return resp, nil
}

func TestDispatchRelease(t *testing.T) {
	tests := []struct {
		name      string
		handler   ReleaseFunc
		in        []byte
		wantErr   string // substring of the response's Error; "" for success
		decisions int
	}{
		{"handler answers", releaseAll, policyRequest(), "", 1},
		{"no handler", nil, policyRequest(), "no handler registered", 0},
		{"panic becomes error", func(*abi.PolicyRequest) (*abi.PolicyResponse, error) { panic("boom") }, policyRequest(), "panic: boom", 0},
		{"runtime panic becomes error", func(req *abi.PolicyRequest) (*abi.PolicyResponse, error) {
			return &abi.PolicyResponse{Decisions: []abi.Decision{{AllocID: req.Claims[5].AllocID}}}, nil
		}, policyRequest(), "panic: runtime error: index out of range", 0},
		{"handler error", func(*abi.PolicyRequest) (*abi.PolicyResponse, error) { return nil, errors.New("cannot judge") }, policyRequest(), "cannot judge", 0},
		{"nil response", func(*abi.PolicyRequest) (*abi.PolicyResponse, error) { return nil, nil }, policyRequest(), "no response", 0},
		{"malformed request", releaseAll, []byte{0x1a, 0x05}, "malformed", 0},
		{"empty request is a valid empty message", releaseAll, nil, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handlers{Release: tc.handler}
			out := h.DispatchRelease(tc.in, []byte("keep"))
			if string(out[:4]) != "keep" {
				t.Fatal("dispatch did not append to out")
			}
			var resp abi.PolicyResponse
			if err := resp.Unmarshal(out[4:]); err != nil {
				t.Fatalf("response does not decode: %v", err)
			}
			if tc.wantErr == "" && resp.Error != "" || !strings.Contains(resp.Error, tc.wantErr) {
				t.Fatalf("Error = %q, want containing %q", resp.Error, tc.wantErr)
			}
			if len(resp.Decisions) != tc.decisions {
				t.Fatalf("%d decisions, want %d", len(resp.Decisions), tc.decisions)
			}
		})
	}
}

func TestDispatchReleaseRaw(t *testing.T) {
	tests := []struct {
		name    string
		raw     RawFunc
		wantOut []byte // exact bytes after the "keep" prefix; nil: decode and check wantErr
		wantErr string
	}{
		{"raw bytes pass through", func(in, out []byte) ([]byte, error) { return append(out, 0xff, 0x00), nil }, []byte{0xff, 0x00}, ""},
		{"raw error encoded", func(in, out []byte) ([]byte, error) { return append(out, 1, 2, 3), errors.New("raw failed") }, nil, "raw failed"},
		{"raw panic encoded", func(in, out []byte) ([]byte, error) { panic("raw boom") }, nil, "panic: raw boom"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handlers{ReleaseRaw: tc.raw, Release: releaseAll}
			out := h.DispatchRelease(policyRequest(), []byte("keep"))
			if string(out[:4]) != "keep" {
				t.Fatal("prefix lost")
			}
			if tc.wantOut != nil {
				if string(out[4:]) != string(tc.wantOut) {
					t.Fatalf("out = %x, want %x", out[4:], tc.wantOut)
				}
				return
			}
			var resp abi.PolicyResponse
			if err := resp.Unmarshal(out[4:]); err != nil || !strings.Contains(resp.Error, tc.wantErr) {
				t.Fatalf("resp %+v err %v, want Error ~%q", resp, err, tc.wantErr)
			}
		})
	}
}

func TestDispatchConfigure(t *testing.T) {
	req := (&abi.ConfigureRequest{ModuleName: "grace-policy", Config: map[string]string{"grace": "30s"}}).MarshalAppend(nil)
	tests := []struct {
		name        string
		handler     ConfigureFunc
		in          []byte
		wantVersion string
		wantErr     string
	}{
		{"handler sees config", func(cfg map[string]string) (string, error) { return "v-" + cfg["grace"], nil }, req, "v-30s", ""},
		{"no handler succeeds", nil, req, "", ""},
		{"handler error", func(map[string]string) (string, error) { return "1.0", errors.New("bad grace") }, req, "1.0", "bad grace"},
		{"panic becomes error", func(map[string]string) (string, error) { panic(errors.New("kaput")) }, req, "", "panic: kaput"},
		{"malformed request", nil, []byte{0xff}, "", "malformed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := &Handlers{Configure: tc.handler}
			var resp abi.ConfigureResponse
			if err := resp.Unmarshal(h.DispatchConfigure(tc.in, nil)); err != nil {
				t.Fatal(err)
			}
			if resp.Version != tc.wantVersion || (tc.wantErr == "") != (resp.Error == "") || !strings.Contains(resp.Error, tc.wantErr) {
				t.Fatalf("got %+v, want version %q error ~%q", resp, tc.wantVersion, tc.wantErr)
			}
			if tc.wantErr != "malformed" && h.moduleName != "grace-policy" {
				t.Fatalf("module name %q not recorded", h.moduleName)
			}
		})
	}
}

// An adapter's declared steps reach the host in every configure response,
// whatever the configure handler answers.
func TestDispatchConfigureAdaptSteps(t *testing.T) {
	req := (&abi.ConfigureRequest{ModuleName: "gcepd-adapter"}).MarshalAppend(nil)
	for _, steps := range [][]string{nil, {abi.StepControllerUnpublish}, {abi.StepControllerPublish, abi.StepControllerUnpublish}} {
		h := &Handlers{AdaptSteps: steps, Configure: func(map[string]string) (string, error) { return "1.0.0", nil }}
		var resp abi.ConfigureResponse
		if err := resp.Unmarshal(h.DispatchConfigure(req, nil)); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(resp.AdaptSteps, steps) || resp.Version != "1.0.0" {
			t.Fatalf("declared %q, response %+v", steps, resp)
		}
	}
}

func TestDispatchAdaptAndClassify(t *testing.T) {
	adaptReq := (&abi.AdapterRequest{Step: "controller-unpublish", Volume: abi.VolumeView{ExternalID: "disk-1"}}).MarshalAppend(nil)
	classifyReq := (&abi.ClassifyRequest{Step: "node-unpublish", Code: 5}).MarshalAppend(nil)
	h := &Handlers{
		Adapt: func(r *abi.AdapterRequest) (*abi.AdapterResponse, error) {
			return &abi.AdapterResponse{VolumeID: r.Volume.ExternalID, NodeID: "n"}, nil
		},
		Classify: func(r *abi.ClassifyRequest) (*abi.ClassifyResponse, error) {
			if r.Code == 5 {
				return &abi.ClassifyResponse{Outcome: abi.OutcomeDone}, nil
			}
			panic("unexpected code")
		},
	}
	var ar abi.AdapterResponse
	if err := ar.Unmarshal(h.DispatchAdapt(adaptReq, nil)); err != nil || ar.VolumeID != "disk-1" || ar.Error != "" {
		t.Fatalf("adapt: %+v %v", ar, err)
	}
	var cr abi.ClassifyResponse
	if err := cr.Unmarshal(h.DispatchClassify(classifyReq, nil)); err != nil || cr.Outcome != abi.OutcomeDone {
		t.Fatalf("classify: %+v %v", cr, err)
	}
	other := (&abi.ClassifyRequest{Code: 2}).MarshalAppend(nil)
	if err := cr.Unmarshal(h.DispatchClassify(other, nil)); err != nil || cr.Error != "panic: unexpected code" {
		t.Fatalf("classify panic: %+v %v", cr, err)
	}

	var empty Handlers
	if err := ar.Unmarshal(empty.DispatchAdapt(adaptReq, nil)); err != nil || !strings.Contains(ar.Error, "no handler") {
		t.Fatalf("adapt without handler: %+v %v", ar, err)
	}
	if err := cr.Unmarshal(empty.DispatchClassify(classifyReq, nil)); err != nil || !strings.Contains(cr.Error, "no handler") {
		t.Fatalf("classify without handler: %+v %v", cr, err)
	}
}

func TestRegisterHelpers(t *testing.T) {
	saved := registered
	t.Cleanup(func() { registered = saved })
	HandleRelease(releaseAll)
	HandleConfigure(func(map[string]string) (string, error) { return "x", nil })
	HandleAdapt(func(*abi.AdapterRequest) (*abi.AdapterResponse, error) { return &abi.AdapterResponse{}, nil })
	HandleClassify(func(*abi.ClassifyRequest) (*abi.ClassifyResponse, error) { return &abi.ClassifyResponse{}, nil })
	HandleReleaseRaw(func(in, out []byte) ([]byte, error) { return out, nil })
	if registered.ReleaseRaw == nil || registered.Release == nil || registered.Configure == nil || registered.Adapt == nil || registered.Classify == nil {
		t.Fatal("Handle* did not register")
	}
	registered.DispatchConfigure((&abi.ConfigureRequest{ModuleName: "m"}).MarshalAppend(nil), nil)
	if ModuleName() != "m" {
		t.Fatalf("ModuleName = %q", ModuleName())
	}
}

func TestErrorResponse(t *testing.T) {
	err := lengthError(4096, 1024)
	tests := []struct {
		export string
		msg    abi.Message
	}{
		{abi.ExportConfigure, &abi.ConfigureResponse{}},
		{abi.ExportDecideRelease, &abi.PolicyResponse{}},
		{abi.ExportAdaptRequest, &abi.AdapterResponse{}},
		{abi.ExportClassifyError, &abi.ClassifyResponse{}},
	}
	for _, tc := range tests {
		if err := tc.msg.Unmarshal(errorResponse(tc.export, err, nil)); err != nil {
			t.Fatalf("%s: %v", tc.export, err)
		}
		if got := reflect.ValueOf(tc.msg).Elem().FieldByName("Error").String(); !strings.Contains(got, "request length 4096 does not fit the 1024-byte buffer") {
			t.Fatalf("%s: Error = %q", tc.export, got)
		}
	}
	if out := errorResponse("volhost_unknown", err, []byte("x")); string(out) != "x" {
		t.Fatalf("unknown export appended %q", out)
	}
}

func releaseAllInto(req *abi.PolicyRequest, resp *abi.PolicyResponse) error {
	for _, c := range req.Claims {
		resp.Decisions = append(resp.Decisions, abi.Decision{AllocID: c.AllocID, Action: abi.ActionRelease, Reason: "ok"})
	}
	return nil
}

func TestDispatchReleaseInto(t *testing.T) {
	tests := []struct {
		name      string
		handler   ReleaseIntoFunc
		in        []byte
		wantErr   string // substring of the response's Error; "" for success
		decisions int
	}{
		{"handler answers", releaseAllInto, policyRequest(), "", 1},
		{"panic becomes error", func(*abi.PolicyRequest, *abi.PolicyResponse) error { panic("boom") }, policyRequest(), "panic: boom", 0},
		{"runtime panic becomes error", func(req *abi.PolicyRequest, resp *abi.PolicyResponse) error {
			resp.Decisions = append(resp.Decisions, abi.Decision{AllocID: req.Claims[5].AllocID})
			return nil
		}, policyRequest(), "panic: runtime error: index out of range", 0},
		{"handler error", func(*abi.PolicyRequest, *abi.PolicyResponse) error { return errors.New("cannot judge") }, policyRequest(), "cannot judge", 0},
		{"error in the response: only the error is sent", func(req *abi.PolicyRequest, resp *abi.PolicyResponse) error {
			_ = releaseAllInto(req, resp)
			resp.Error = "refused"
			return nil
		}, policyRequest(), "refused", 0},
		{"malformed request", releaseAllInto, []byte{0x1a, 0x05}, "malformed", 0},
		{"empty request is a valid empty message", releaseAllInto, nil, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// Release is set too: ReleaseInto takes precedence.
			h := &Handlers{ReleaseInto: tc.handler, Release: func(*abi.PolicyRequest) (*abi.PolicyResponse, error) {
				return nil, errors.New("Release called")
			}}
			out := h.DispatchRelease(tc.in, []byte("keep"))
			if string(out[:4]) != "keep" {
				t.Fatal("dispatch did not append to out")
			}
			var resp abi.PolicyResponse
			if err := resp.Unmarshal(out[4:]); err != nil {
				t.Fatalf("response does not decode: %v", err)
			}
			if tc.wantErr == "" && resp.Error != "" || !strings.Contains(resp.Error, tc.wantErr) {
				t.Fatalf("Error = %q, want containing %q", resp.Error, tc.wantErr)
			}
			if len(resp.Decisions) != tc.decisions {
				t.Fatalf("%d decisions, want %d", len(resp.Decisions), tc.decisions)
			}
		})
	}
}

// One Handlers serving the default policy through ReleaseInto over the
// whole corpus, twice (so the reused request and response shrink and grow):
// every answer is the native Decide's, and a repeated 8-claim call
// allocates nothing, the property that keeps GC work off a Go guest's call
// path. A handler that allocated, or an SDK that copied the
// request's strings again, fails the count.
func TestDispatchReleaseIntoReusesAndMatches(t *testing.T) {
	h := &Handlers{ReleaseInto: func(req *abi.PolicyRequest, resp *abi.PolicyResponse) error {
		defaultpolicy.DecideInto(req, resp)
		return nil
	}}
	var out []byte
	for round := range 2 {
		for i, req := range defaultpolicy.Corpus() {
			out = h.DispatchRelease(req.MarshalAppend(nil), out[:0])
			var got abi.PolicyResponse
			if err := got.Unmarshal(out); err != nil {
				t.Fatal(err)
			}
			if want := defaultpolicy.Decide(req); !reflect.DeepEqual(normalized(got), normalized(*want)) {
				t.Fatalf("round %d request %d: got %+v, want %+v", round, i, got, *want)
			}
		}
	}
	in := eightClaims().MarshalAppend(nil)
	out = h.DispatchRelease(in, out[:0])
	if n := testing.AllocsPerRun(200, func() { out = h.DispatchRelease(in, out[:0]) }); n != 0 {
		t.Fatalf("%.0f allocations per 8-claim call in steady state, want 0", n)
	}
	old := &Handlers{Release: func(req *abi.PolicyRequest) (*abi.PolicyResponse, error) { return defaultpolicy.Decide(req), nil }}
	if n := testing.AllocsPerRun(200, func() { out = old.DispatchRelease(in, out[:0]) }); n == 0 {
		t.Fatal("the Release path allocates nothing either: the count above proves nothing")
	}
}

// normalized makes an empty Decisions slice nil, as a decode gives it.
func normalized(r abi.PolicyResponse) abi.PolicyResponse {
	if len(r.Decisions) == 0 {
		r.Decisions = nil
	}
	return r
}

// eightClaims is the benchmark's volume (test/extism volumeRequest).
func eightClaims() *abi.PolicyRequest {
	statuses := []string{"complete", "running", "failed", "lost", "pending", "gone"}
	nodes := []string{"ready", "down", "gone"}
	req := &abi.PolicyRequest{NowUnixMs: 1_750_000_000_000, Volume: abi.VolumeView{Namespace: "default", ID: "web-data", PluginID: "gcepd"}}
	for i := range 8 {
		id := "alloc-" + string(rune('0'+i))
		req.Claims = append(req.Claims, abi.ClaimView{AllocID: id, NodeID: "node-" + string(rune('0'+i%3)), Mode: "write", State: "taken"})
		req.Allocs = append(req.Allocs, abi.AllocView{ID: id, ClientStatus: statuses[i%len(statuses)]})
	}
	for i := range 3 {
		req.Nodes = append(req.Nodes, abi.NodeView{ID: "node-" + string(rune('0'+i)), Status: nodes[i]})
	}
	return req
}
