// Command releasebench measures claim release end to end (make bench): the
// real volhost binary releasing N claims through the real GCE PD driver
// (cmd/gcepd), once per scenario, each with a fresh agent and driver. The
// latency of a claim is from the moment its allocation is marked complete
// to the volhost event that removes the claim (server timestamps, read from
// the events API); throughput is claims / time to the last removal.
//
// Every ControllerUnpublish is delayed by -controller-latency (25ms) through
// the driver's fault interceptor, standing in for a cloud detach call.
//
// Scenarios: controller concurrency 1, 4 and 16 with the native policy and
// adapter; the reference-system-like baseline (controller concurrency 1 and
// a per-volume limit of 1 pass/s, burst 3); and, when the example modules
// are built, concurrency 16 with the Wasm default policy and GCE PD adapter.
// It writes release.json, release.md (a Markdown section) and release.png.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/volhost/volhost/test/peers/e2e"
	"github.com/volhost/volhost/test/peers/internal/fault"
)

// Scenario is one measured configuration.
type Scenario struct {
	Name                  string  `json:"name"`
	ControllerConcurrency int     `json:"controller_concurrency"`
	VolumeRateLimit       float64 `json:"volume_rate_limit,omitempty"`
	VolumeRateBurst       int     `json:"volume_rate_burst,omitempty"`
	Wasm                  bool    `json:"wasm,omitempty"`
	// AS serves the AssemblyScript ports (as-default-policy,
	// as-gcepd-adapter) under the Go modules' names and manifests, so only
	// the guest language differs from the wasm scenario.
	AS bool `json:"as,omitempty"`
}

// Result is one scenario's numbers.
type Result struct {
	Scenario
	Claims        int     `json:"claims"`
	Seconds       float64 `json:"seconds"`
	ClaimsPerSec  float64 `json:"claims_per_sec"`
	P50ms         float64 `json:"p50_ms"`
	P90ms         float64 `json:"p90_ms"`
	P99ms         float64 `json:"p99_ms"`
	MaxMs         float64 `json:"max_ms"`
	ControllerRPC int     `json:"controller_unpublish_calls"`
	// Rounds holds the throughput of every round and RoundsP99 its p99
	// latency, in round order; the other numbers are those of the median
	// round (by throughput).
	Rounds    []float64 `json:"rounds_claims_per_sec"`
	RoundsP99 []float64 `json:"rounds_p99_ms"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "releasebench:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		claims      = flag.Int("claims", 1000, "claims released per scenario")
		nodes       = flag.Int("nodes", 10, "client nodes (GCE instances) the claims are spread over")
		out         = flag.String("out", ".", "directory for release.json, release.md and release.png")
		pluginBuild = flag.String("plugin-build", "", "directory of built example modules (make plugins); empty: no Wasm scenario")
		only        = flag.String("only", "", "comma-separated scenario names to run (default all)")
		rounds      = flag.Int("rounds", 5, "rounds (at least 5 for the ratios); each runs every scenario once, in turn, so machine noise spreads over all of them")
		latency     = flag.Duration("controller-latency", 25*time.Millisecond, "added to every ControllerUnpublish (a gRPC hang before the real driver runs): the fake cloud answers in microseconds, a real detach takes far longer")
	)
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	binDir, err := os.MkdirTemp("", "vh-bench-bin")
	if err != nil {
		return err
	}
	defer os.RemoveAll(binDir)
	bins, err := e2e.Build(ctx, binDir)
	if err != nil {
		return err
	}
	scenarios := []Scenario{
		{Name: "native cc=1", ControllerConcurrency: 1},
		{Name: "native cc=4", ControllerConcurrency: 4},
		{Name: "native cc=16", ControllerConcurrency: 16},
		{Name: "baseline cc=1 1/s burst 3", ControllerConcurrency: 1, VolumeRateLimit: 1, VolumeRateBurst: 3},
	}
	if *pluginBuild != "" {
		scenarios = append(scenarios, Scenario{Name: "wasm cc=16", ControllerConcurrency: 16, Wasm: true},
			Scenario{Name: "wasm-as cc=16", ControllerConcurrency: 16, Wasm: true, AS: true})
	}
	var picked []Scenario
	for _, s := range scenarios {
		if *only == "" || slices.Contains(strings.Split(*only, ","), s.Name) {
			picked = append(picked, s)
		}
	}
	runs := make([][]Result, len(picked))
	for round := 1; round <= *rounds; round++ {
		for i, s := range picked {
			fmt.Fprintf(os.Stderr, "releasebench: round %d/%d: %s: %d claims over %d nodes\n", round, *rounds, s.Name, *claims, *nodes)
			r, err := measure(ctx, bins, s, *claims, *nodes, *pluginBuild, *latency)
			if err != nil {
				return fmt.Errorf("%s: %w", s.Name, err)
			}
			fmt.Fprintf(os.Stderr, "releasebench: %s: %.1f claims/s, p50 %.0fms p99 %.0fms\n", s.Name, r.ClaimsPerSec, r.P50ms, r.P99ms)
			runs[i] = append(runs[i], r)
		}
	}
	results := make([]Result, len(picked))
	for i, rs := range runs {
		var byRound, p99 []float64
		for _, r := range rs {
			byRound, p99 = append(byRound, r.ClaimsPerSec), append(p99, r.P99ms)
		}
		slices.SortFunc(rs, func(a, b Result) int { return cmp.Compare(a.ClaimsPerSec, b.ClaimsPerSec) })
		results[i] = rs[len(rs)/2]
		results[i].Rounds, results[i].RoundsP99 = byRound, p99
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(results, "", "  ")
	if err := os.WriteFile(filepath.Join(*out, "release.json"), b, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*out, "release.md"), []byte(markdown(results, *claims, *nodes, *rounds, *latency)), 0o644); err != nil {
		return err
	}
	return plotResults(results, filepath.Join(*out, "release.png"))
}

func measure(ctx context.Context, bins e2e.Bins, s Scenario, n, nnodes int, pluginBuild string, latency time.Duration) (Result, error) {
	dir, err := os.MkdirTemp("", "vh-bench")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	var nodeNames []string
	for i := 0; i < nnodes; i++ {
		nodeNames = append(nodeNames, fmt.Sprintf("node-%d", i))
	}
	drv, err := e2e.StartGCEPD(ctx, dir, dir, bins.Gcepd, e2e.GCEPDOptions{Nodes: nodeNames, Disks: n})
	if err != nil {
		return Result{}, err
	}
	defer drv.Stop(5 * time.Second)

	cfg := fmt.Sprintf(`log_level = "warn"
watcher {
  controller_concurrency = %d
  csi_timeout            = "1m"
  volume_rate_limit      = %g
  volume_rate_burst      = %d
}
`, s.ControllerConcurrency, s.VolumeRateLimit, s.VolumeRateBurst)
	var args []string
	if s.Wasm {
		modDir := filepath.Join(dir, "modules")
		if err := os.MkdirAll(modDir, 0o755); err != nil {
			return Result{}, err
		}
		for _, f := range []string{"default-policy.wasm", "default-policy.hcl", "gcepd-adapter.wasm", "gcepd-adapter.hcl"} {
			src := f
			if s.AS && strings.HasSuffix(f, ".wasm") {
				src = "as-" + f
			}
			b, err := os.ReadFile(filepath.Join(pluginBuild, src))
			if err != nil {
				return Result{}, fmt.Errorf("wasm scenario needs make plugins: %w", err)
			}
			if err := os.WriteFile(filepath.Join(modDir, f), b, 0o644); err != nil {
				return Result{}, err
			}
		}
		args = append(args, "-module-dir", modDir)
	}
	agent, err := e2e.StartAgent(ctx, dir, bins.Volhost, cfg, args...)
	if err != nil {
		return Result{}, err
	}
	defer agent.Stop(10 * time.Second)
	// The adapter module matches plugin IDs gcepd and gcepd-*; every
	// scenario uses the same ID so only the modules differ.
	const plugin = "gcepd"
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		_ = os.WriteFile(p, []byte(body), 0o600)
		return p
	}
	cli := func(args ...string) error {
		out, code, err := agent.CLI(ctx, args...)
		if err == nil && code != 0 {
			err = fmt.Errorf("volhost %s: exit %d: %s", strings.Join(args, " "), code, out)
		}
		return err
	}
	if err := cli("plugin", "register", write("plugin.hcl", fmt.Sprintf("plugin %q {\n  controller_endpoint = %q\n}\n", plugin, e2e.Endpoint(drv.Controller)))); err != nil {
		return Result{}, err
	}
	for _, nn := range nodeNames {
		spec := fmt.Sprintf("node %q {\n  status = \"ready\"\n  root_dir = %q\n  plugin %q {\n    endpoint = %q\n  }\n}\n",
			nn, filepath.Join(dir, "root", nn), plugin, e2e.Endpoint(drv.Nodes[nn]))
		if err := cli("node", "register", write(nn+".hcl", spec)); err != nil {
			return Result{}, err
		}
	}
	vols := make([]e2e.VolumeSpec, n)
	allocs := make([]e2e.AllocSpec, n)
	for i := range vols {
		vols[i] = e2e.VolumeSpec{ID: fmt.Sprintf("vol-%d", i), Namespace: "default", ExternalID: drv.VolumeID(fmt.Sprintf("disk-%d", i)),
			PluginID: plugin, AccessMode: "single-node-writer", AttachmentMode: "file-system", FSType: "ext4"}
		allocs[i] = e2e.AllocSpec{ID: fmt.Sprintf("alloc-%d", i), Namespace: "default", NodeID: nodeNames[i%nnodes], JobID: "bench", ClientStatus: "running"}
	}
	if err := agent.API.RegisterVolumes(ctx, vols); err != nil {
		return Result{}, err
	}
	if err := agent.API.UpsertAllocs(ctx, allocs); err != nil {
		return Result{}, err
	}
	if err := claimAll(ctx, agent.API, allocs); err != nil {
		return Result{}, err
	}
	if err := drv.Control.ResetCalls(ctx); err != nil {
		return Result{}, err
	}
	if latency > 0 {
		if err := drv.Control.Fault(ctx, fault.Rule{Method: "ControllerUnpublishVolume", Hang: latency.String()}); err != nil {
			return Result{}, err
		}
	}

	// Follow the events from here on, then end every allocation in one write.
	since, err := lastEventIndex(ctx, agent.Addr)
	if err != nil {
		return Result{}, err
	}
	for i := range allocs {
		allocs[i].ClientStatus = "complete"
	}
	start := time.Now()
	if err := agent.API.UpsertAllocs(ctx, allocs); err != nil {
		return Result{}, err
	}
	removed, err := followRemovals(ctx, agent.Addr, since, n)
	if err != nil {
		return Result{}, err
	}
	lat := make([]float64, 0, n)
	var last time.Duration
	for _, t := range removed {
		d := max(t.Sub(start), 0)
		last = max(last, d)
		lat = append(lat, float64(d)/float64(time.Millisecond))
	}
	slices.Sort(lat)
	calls, err := drv.Control.Calls(ctx)
	if err != nil {
		return Result{}, err
	}
	cu := 0
	for _, c := range calls.Calls {
		if c.Method == "ControllerUnpublishVolume" {
			cu++
		}
	}
	return Result{
		Scenario: s, Claims: n, Seconds: last.Seconds(), ClaimsPerSec: float64(n) / last.Seconds(),
		P50ms: pct(lat, 0.50), P90ms: pct(lat, 0.90), P99ms: pct(lat, 0.99), MaxMs: lat[len(lat)-1], ControllerRPC: cu,
	}, nil
}

func pct(sorted []float64, p float64) float64 {
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// claimAll claims every allocation's volume with a few clients at once
// (publishing is not what is measured).
func claimAll(ctx context.Context, api *e2e.API, allocs []e2e.AllocSpec) error {
	work := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for w := 0; w < 2*runtime.NumCPU(); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				err := api.Claim(ctx, e2e.ClaimRequest{Namespace: "default", VolumeID: fmt.Sprintf("vol-%d", i),
					AllocID: allocs[i].ID, NodeID: allocs[i].NodeID, Mode: "write"})
				if err != nil {
					select {
					case errs <- fmt.Errorf("claim vol-%d: %w", i, err):
					default:
					}
				}
			}
		}()
	}
	for i := range allocs {
		work <- i
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

type event struct {
	Index    uint64            `json:"index"`
	Time     time.Time         `json:"time"`
	Type     string            `json:"type"`
	VolumeID string            `json:"volume_id"`
	Message  string            `json:"message"`
	Fields   map[string]string `json:"fields"`
}

func getEvents(ctx context.Context, addr string, since uint64, wait time.Duration) ([]event, uint64, error) {
	q := url.Values{"index": {strconv.FormatUint(since, 10)}, "wait": {wait.String()}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, addr+"/v1/events?"+q.Encode(), nil)
	if err != nil {
		return nil, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("GET /v1/events: %s", resp.Status)
	}
	var evs []event
	if err := json.NewDecoder(resp.Body).Decode(&evs); err != nil {
		return nil, 0, err
	}
	idx, _ := strconv.ParseUint(resp.Header.Get("X-Volhost-Index"), 10, 64)
	return evs, idx, nil
}

func lastEventIndex(ctx context.Context, addr string) (uint64, error) {
	evs, _, err := getEvents(ctx, addr, 0, 0)
	if err != nil {
		return 0, err
	}
	var last uint64
	for _, e := range evs {
		last = max(last, e.Index)
	}
	return last, nil
}

// followRemovals tails the events (blocking queries) until n claims have
// been released and removed, returning each volume's removal time.
func followRemovals(ctx context.Context, addr string, since uint64, n int) (map[string]time.Time, error) {
	removed := map[string]time.Time{}
	for len(removed) < n {
		evs, _, err := getEvents(ctx, addr, since, 30*time.Second)
		if err != nil {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%d of %d claims released: %w", len(removed), n, ctx.Err())
		}
		for _, e := range evs {
			since = max(since, e.Index)
			if e.Type == "claim-transition" && strings.Contains(e.Message, "released and removed") {
				if _, ok := removed[e.VolumeID]; !ok {
					removed[e.VolumeID] = e.Time
				}
			}
			if e.Type == "volume-stuck" {
				return nil, errors.New("a volume became stuck: " + e.Message)
			}
		}
	}
	return removed, nil
}

func markdown(rs []Result, claims, nodes, rounds int, latency time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d claims over %d nodes per scenario, each run with a fresh `volhost agent -dev` and a fresh GCE PD driver (`test/peers/cmd/gcepd`, fake cloud); ", claims, nodes)
	if latency > 0 {
		fmt.Fprintf(&b, "every ControllerUnpublish waits %s before the real driver runs it (the fake cloud answers in microseconds, a real cloud detach takes far longer, and controller concurrency is about overlapping those waits); ", latency)
	}
	fmt.Fprintf(&b, "%d rounds, each running every scenario once in turn; the row is the median round by throughput, and the last column lists every round. ", rounds)
	b.WriteString("Latency: allocation marked complete → the event that removes the claim (server timestamps). Throughput: claims / time to the last removal.\n\n")
	b.WriteString("| scenario | controller concurrency | per-volume limit | claims/s | p50 ms | p90 ms | p99 ms | max ms | ControllerUnpublish calls | claims/s by round |\n")
	b.WriteString("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	var base, native16, wasm16, as16 *Result
	for i := range rs {
		r := &rs[i]
		limit := "none"
		if r.VolumeRateLimit > 0 {
			limit = fmt.Sprintf("%g/s burst %d", r.VolumeRateLimit, r.VolumeRateBurst)
		}
		var byRound []string
		for _, x := range r.Rounds {
			byRound = append(byRound, fmt.Sprintf("%.0f", x))
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %.1f | %.0f | %.0f | %.0f | %.0f | %d | %s |\n", r.Name, r.ControllerConcurrency, limit,
			r.ClaimsPerSec, r.P50ms, r.P90ms, r.P99ms, r.MaxMs, r.ControllerRPC, strings.Join(byRound, ", "))
		switch {
		case r.VolumeRateLimit > 0:
			base = r
		case r.AS && r.ControllerConcurrency == 16:
			as16 = r
		case r.Wasm && r.ControllerConcurrency == 16:
			wasm16 = r
		case !r.Wasm && r.ControllerConcurrency == 16:
			native16 = r
		}
	}
	fmt.Fprintf(&b, "\nRatios, each the median [min-max] of the per-round ratios over the %d rounds:\n\n", rounds)
	if base != nil {
		for _, r := range rs {
			if r.VolumeRateLimit == 0 && !r.Wasm {
				fmt.Fprintf(&b, "- %s vs baseline: throughput ×%s, p99 latency ×%s\n", r.Name,
					perRound(r.Rounds, base.Rounds, "%.2f"), perRound(r.RoundsP99, base.RoundsP99, "%.2f"))
			}
		}
	}
	if base != nil {
		b.WriteString("- The baseline's cost is its one controller call at a time: with one claim per volume a release needs at most three passes of a volume, within the burst of 3, so the per-volume limit itself does not bite in this workload.\n")
	}
	if native16 != nil && wasm16 != nil {
		fmt.Fprintf(&b, "- Wasm policy and adapter vs native at concurrency 16: throughput ×%s (target ≥ 0.95)\n", perRound(wasm16.Rounds, native16.Rounds, "%.3f"))
	}
	if native16 != nil && as16 != nil {
		fmt.Fprintf(&b, "- The same with the AssemblyScript ports of both modules: throughput ×%s\n", perRound(as16.Rounds, native16.Rounds, "%.3f"))
	}
	return b.String()
}

// perRound is the median [min-max] of a[k]/b[k] over the rounds both have,
// each number in format: a ratio measured round by round, so a round the
// machine slowed down for every scenario cancels out.
func perRound(a, b []float64, format string) string {
	var q []float64
	for k := range min(len(a), len(b)) {
		if b[k] > 0 {
			q = append(q, a[k]/b[k])
		}
	}
	if len(q) == 0 {
		return "-"
	}
	slices.Sort(q)
	return fmt.Sprintf(format+" ["+format+"-"+format+"]", q[len(q)/2], q[0], q[len(q)-1])
}
