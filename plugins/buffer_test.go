package plugins

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/volhost/volhost/abi"
)

// TestKeptRequestBuffer: a module exporting volhost_buffer_capacity (ABI
// 1.2: both SDKs do) is asked for its buffer once per instance and again
// only for a request longer than the capacity it reported; a module
// without the export is asked before every request, as ABI 1.0 says. The
// answers are the same either way.
func TestKeptRequestBuffer(t *testing.T) {
	kept := newHmod()
	kept.funcs = []hfunc{{typ: htI32, code: i32c(4096), export: abi.ExportBufferCapacity}}
	const poolOne = "limits {\n  pool_size = 1\n  call_timeout = \"5s\"\n}"
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "go", exampleWasm(t, "default-policy"), manifest("release-policy", poolOne))
		writeModule(t, dir, "as", exampleWasm(t, "as-default-policy"), manifest("release-policy", poolOne))
		writeModule(t, dir, "hmod-kept", kept.build(), manifest("release-policy", poolOne))
		writeModule(t, dir, "hmod-1.0", newHmod().build(), manifest("release-policy", poolOne))
	}, nil)
	// bufferCalls of the module's one instance.
	bufferCalls := func(name string) int {
		g := (*e.m.modules.Load())[name].cur.Load()
		inst := g.takeIdle()
		defer g.putIdle(inst)
		return inst.bufferCalls
	}
	ctx := context.Background()
	calls := func(name string, req *abi.PolicyRequest, n int) int {
		before := bufferCalls(name)
		for range n {
			resp, err := e.m.DecideRelease(ctx, name, req)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if strings.HasPrefix(name, "hmod") {
				continue // an empty answer by construction
			}
			if len(resp.Decisions) != len(req.Claims) {
				t.Fatalf("%s: %d decisions for %d claims", name, len(resp.Decisions), len(req.Claims))
			}
		}
		return bufferCalls(name) - before
	}
	small, large := volumeRequest(8), volumeRequest(400)
	for _, tc := range []struct {
		module string
		abi    string
		small  int // volhost_buffer calls for 50 small requests after the first
		large  int // then 50 requests longer than any before; -1: an ABI fault
	}{
		{"go", "1.2", 0, 1},
		{"as", "1.2", 0, 1},
		{"hmod-kept", "1.2", 0, -1}, // reports 4096 whatever it was asked: a fault
		{"hmod-1.0", "1.0", 50, 50},
	} {
		t.Run(tc.module, func(t *testing.T) {
			st, _ := e.m.StatusOf(tc.module)
			if st.State != StateServing || st.ABI != tc.abi {
				t.Fatalf("state %s, ABI %q (refusal %q), want serving %s", st.State, st.ABI, st.Refusal, tc.abi)
			}
			if want := tc.abi == "1.2"; slices.Contains(st.OptionalExports, abi.ExportBufferCapacity) != want {
				t.Fatalf("optional exports %q", st.OptionalExports)
			}
			calls(tc.module, small, 1)
			if got := calls(tc.module, small, 50); got != tc.small {
				t.Errorf("%d volhost_buffer calls for 50 small requests, want %d", got, tc.small)
			}
			if len(large.MarshalAppend(nil)) <= 4096 {
				t.Fatal("the large request fits 4096 bytes: the test no longer grows the buffer")
			}
			if tc.large < 0 {
				_, err := e.m.DecideRelease(ctx, tc.module, large)
				if fe := assertFault(t, err, FaultABI); !strings.Contains(fe.Error(), "volhost_buffer_capacity() = 4096 after volhost_buffer(") {
					t.Fatalf("a capacity below the request: %v", fe)
				}
				return
			}
			if got := calls(tc.module, large, 50); got != tc.large {
				t.Errorf("%d volhost_buffer calls for 50 large requests, want %d", got, tc.large)
			}
		})
	}
}

// TestBufferCapacityBelowRequest: a volhost_buffer_capacity smaller than
// the request volhost_buffer just made room for is an ABI violation; the
// module is refused at load (its configure call faults), naming it.
func TestBufferCapacityBelowRequest(t *testing.T) {
	liar := newHmod()
	liar.funcs = []hfunc{{typ: htI32, code: i32c(0), export: abi.ExportBufferCapacity}}
	wrong := newHmod()
	wrong.funcs = []hfunc{{typ: htI32I32, code: i32c(0), export: abi.ExportBufferCapacity}}
	e := newEnv(t, func(dir string) {
		writeModule(t, dir, "liar", liar.build(), manifest("release-policy", ""))
		writeModule(t, dir, "wrong", wrong.build(), manifest("release-policy", ""))
	}, nil)
	st, _ := e.m.StatusOf("liar")
	if want := "volhost_buffer_capacity() = 0 after volhost_buffer("; st.State != StateRefused || !strings.Contains(st.Refusal, want) {
		t.Fatalf("liar: %s %q, want refused with %q", st.State, st.Refusal, want)
	}
	st, _ = e.m.StatusOf("wrong")
	if want := "export volhost_buffer_capacity (ABI 1.2, optional) has signature (i32) -> (i32), want () -> (i32)"; st.State != StateRefused || !strings.Contains(st.Refusal, want) {
		t.Fatalf("wrong: %s %q, want refused with %q", st.State, st.Refusal, want)
	}
}
