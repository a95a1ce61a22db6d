package plugins

import (
	"context"
	"testing"
)

// TestDecideReleaseAllocs holds the host's allocations per 8-claim
// DecideRelease through Manager, on a caller's cancellable context (the
// watcher's leadership context), for each SDK's default policy, to the
// answer's own: the response, its decisions and the one string of the
// message their strings point into (abi's decoder). The rest of the call
// (the caller's context watch, the timeout, the fault typing, the encode
// buffer, stats and breaker) allocates nothing in steady state; before the
// kept watch and faultOf's target only on error it was 9 per call.
func TestDecideReleaseAllocs(t *testing.T) {
	for _, module := range []string{"as-default-policy", "default-policy"} {
		t.Run(module, func(t *testing.T) {
			wasm := exampleWasm(t, module)
			e := newEnv(t, func(dir string) {
				writeModule(t, dir, "p", wasm, manifest("release-policy", "limits {\n pool_size = 1\n max_calls = 100000000\n call_timeout = \"1s\"\n}\n"))
			}, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req := volumeRequest(8)
			call := func() {
				resp, err := e.m.DecideRelease(ctx, "p", req)
				if err != nil || len(resp.Decisions) != 8 {
					t.Fatalf("%v %v", resp, err)
				}
			}
			for range 200 {
				call()
			}
			n := testing.AllocsPerRun(500, call)
			const want = 3
			if n > want {
				t.Errorf("%s: %.1f allocations per call, want <= %d", module, n, want)
			}
		})
	}
}
