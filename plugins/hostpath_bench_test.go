package plugins

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/internal/testutil"
)

// BenchmarkHostPath is the host side of one decision call before and after
// it was made lean (one timer per instance, the answer decoded in place and
// checked without a map), on the same instance of the same guest, in
// interleaved rounds (A, B, A, B, ...), so its ratio is the lever's alone.
// "after" is Manager.DecideRelease. "before" is the call path it replaced, rebuilt
// here from the parts that remain: a context.WithTimeout per call armed
// with context.AfterFunc (invokeOn, which the set-up calls still use), a
// copy of the response out of guest memory before decoding, and the
// answer checked with a map per call. Both run on the caller's context
// with a cancel (the watcher's leadership context), and neither includes
// the instance checkout for the second (both use the pool the same way).
//
//	go test -run '^$' -bench HostPath -benchtime 1x ./plugins/
func BenchmarkHostPath(b *testing.B) {
	for _, module := range []string{"as-default-policy", "default-policy"} {
		b.Run(module, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			g, req, after := hostPathSetup(b, ctx, module)
			before := func() error {
				buf := getBuf()
				*buf = req.MarshalAppend((*buf)[:0])
				inst, err := g.checkout(ctx)
				if err != nil {
					return err
				}
				resp := new(abi.PolicyResponse)
				cctx, cancelCall := context.WithTimeout(ctx, g.man.Limits.CallTimeout)
				err = g.invokeOn(cctx, ctx, inst, abi.ExportDecideRelease, *buf, func(view []byte) (string, error) {
					out := getBuf()
					defer putBuf(out)
					*out = append((*out)[:0], view...)
					if err := resp.Unmarshal(*out); err != nil {
						return "", err
					}
					return resp.Error, checkWithMap(req, resp)
				})
				cancelCall()
				g.checkin(inst, err != nil)
				putBuf(buf)
				if err == nil && len(resp.Decisions) != 8 {
					err = fmt.Errorf("%d decisions", len(resp.Decisions))
				}
				return err
			}
			const rounds, calls = 7, 2000
			sides := []benchSide{{"before", before}, {"after", after}}
			p50s := interleavedP50s(b, rounds, calls, sides)
			old, cut := testutil.SpreadOf(p50s[0]), testutil.SpreadOf(p50s[1])
			ratio := testutil.SpreadOf(testutil.Ratios(p50s[1], p50s[0]))
			b.ReportMetric(old.Median, "before-p50-ns")
			b.ReportMetric(cut.Median, "after-p50-ns")
			b.ReportMetric(ratio.Median, "after/before")
			b.Logf("%s, %d rounds of %d calls per side: p50 before %.0f [%.0f-%.0f] ns, after %.0f [%.0f-%.0f] ns, ratio %.3f [%.3f-%.3f]",
				module, rounds, calls, old.Median, old.Min, old.Max,
				cut.Median, cut.Min, cut.Max, ratio.Median, ratio.Min, ratio.Max)
		})
	}
}

// checkWithMap is checkPolicyResponse as it was before the lean host side (a map of
// the alloc IDs answered, per call), for BenchmarkHostPath's "before".
func checkWithMap(req *abi.PolicyRequest, resp *abi.PolicyResponse) error {
	if len(resp.Decisions) > len(req.Claims) {
		return fmt.Errorf("%d decisions for %d claims", len(resp.Decisions), len(req.Claims))
	}
	seen := make(map[string]bool, len(resp.Decisions))
	for i := range resp.Decisions {
		d := &resp.Decisions[i]
		if claimIndex(req, nil, d.AllocID) < 0 {
			return fmt.Errorf("decision for alloc %q, which is not a claim of the request", d.AllocID)
		}
		if seen[d.AllocID] {
			return fmt.Errorf("two decisions for alloc %q", d.AllocID)
		}
		seen[d.AllocID] = true
		switch d.Action {
		case abi.ActionRelease, abi.ActionWait, abi.ActionReleaseSkipNode:
		default:
			return fmt.Errorf("unknown action %d", d.Action)
		}
		if d.RetryAfterMs < 0 {
			return fmt.Errorf("negative retry_after_ms %d", d.RetryAfterMs)
		}
	}
	return nil
}

// BenchmarkHostPathWatch is the lever (of making the host side allocate
// only the answer) that a caller
// context which can end pays for: the watch of that context kept on the
// instance across calls ("kept") against one registered and stopped per
// call as before ("per-call": the same DecideRelease, then the idle
// instance's watch ended, so the next call registers it again), on a
// cancellable context like the watcher's, in interleaved rounds on the
// same instance.
//
//	go test -run '^$' -bench HostPathWatch -benchtime 1x ./plugins/
func BenchmarkHostPathWatch(b *testing.B) {
	for _, module := range []string{"as-default-policy", "default-policy"} {
		b.Run(module, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			g, _, kept := hostPathSetup(b, ctx, module)
			perCall := func() error {
				err := kept()
				g.unwatchIdle()
				return err
			}
			const rounds, calls = 9, 4000
			sides := []benchSide{{"per-call", perCall}, {"kept", kept}}
			p50s := interleavedP50s(b, rounds, calls, sides)
			old, cut := testutil.SpreadOf(p50s[0]), testutil.SpreadOf(p50s[1])
			ratio := testutil.SpreadOf(testutil.Ratios(p50s[1], p50s[0]))
			b.ReportMetric(ratio.Median, "kept/per-call")
			b.Logf("%s, %d rounds of %d calls per side: p50 per-call watch %.0f [%.0f-%.0f] ns, kept %.0f [%.0f-%.0f] ns, ratio %.3f [%.3f-%.3f]",
				module, rounds, calls, old.Median, old.Min, old.Max,
				cut.Median, cut.Min, cut.Max, ratio.Median, ratio.Min, ratio.Max)
		})
	}
}

// benchSide is one side of an interleaved benchmark: a call and its name.
type benchSide struct {
	name string
	call func() error
}

// interleavedP50s runs every side calls times in turn, rounds times (per
// b.Loop iteration), so the machine's load falls on all sides alike, and
// returns each side's p50 per round in nanoseconds.
func interleavedP50s(b *testing.B, rounds, calls int, sides []benchSide) [][]float64 {
	b.Helper()
	p50s := make([][]float64, len(sides))
	d := make([]time.Duration, calls)
	for b.Loop() {
		for range rounds {
			for i, s := range sides {
				for k := range d {
					t0 := time.Now()
					if err := s.call(); err != nil {
						b.Fatalf("%s: %v", s.name, err)
					}
					d[k] = time.Since(t0)
				}
				slices.Sort(d)
				p50s[i] = append(p50s[i], float64(d[calls/2].Nanoseconds()))
			}
		}
	}
	return p50s
}

// hostPathSetup loads module as the policy "p" with one pooled instance
// and returns its serving generation, an 8-claim request, and a call of
// Manager.DecideRelease on ctx with it that checks the answer's size.
func hostPathSetup(b *testing.B, ctx context.Context, module string) (*generation, *abi.PolicyRequest, func() error) {
	b.Helper()
	wasm := exampleWasm(b, module)
	e := newEnv(b, func(dir string) {
		writeModule(b, dir, "p", wasm, manifest("release-policy", "limits {\n pool_size = 1\n max_calls = 100000000\n call_timeout = \"1s\"\n}\n"))
	}, nil)
	req := volumeRequest(8)
	decide := func() error {
		resp, err := e.m.DecideRelease(ctx, "p", req)
		if err == nil && len(resp.Decisions) != 8 {
			err = fmt.Errorf("%d decisions", len(resp.Decisions))
		}
		return err
	}
	return (*e.m.modules.Load())["p"].cur.Load(), req, decide
}
