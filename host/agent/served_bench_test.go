package agent

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
	"github.com/volhost/volhost/plugins"
)

// BenchmarkModuleStatus times `module status NAME`'s served-volume
// answer (servedQuery) against matching every volume (the answer before
// servedQuery), for the default policy and for an adapter selecting one
// plugin, at 10,000 and 100,000 volumes over four plugins (and at
// VOLHOST_STATUS_VOLUMES, e.g. 1000000). The index side should not grow
// with the volumes; the scan side does. The two sides alternate, round
// after round (VOLHOST_ROUNDS, default 5, of 20 calls each), and each
// row is logged as median [min-max] of the rounds, with the per-round
// ratio scan / index:
//
//	go test -run '^$' -bench '^BenchmarkModuleStatus$' -benchtime 1x ./host/agent/
func BenchmarkModuleStatus(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if n, err := strconv.Atoi(os.Getenv("VOLHOST_STATUS_VOLUMES")); err == nil && n > 0 {
		sizes = []int{n}
	}
	rounds := 5
	if n, err := strconv.Atoi(os.Getenv("VOLHOST_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	const calls = 20
	mods := []plugins.Status{
		{Name: "default-policy", Kind: string(abi.KindReleasePolicy), Default: true},
		{Name: "db-policy", Kind: string(abi.KindReleasePolicy), Volumes: []string{"prod/db-*"}},
		{Name: "ebs-adapter", Kind: string(abi.KindCSIAdapter), PluginIDs: []string{"ebs"}},
	}
	match := rankMatch(mods)
	msPerCall := func(fn func()) func() float64 {
		return func() float64 {
			start := time.Now()
			for range calls {
				fn()
			}
			return float64(time.Since(start)) / float64(time.Millisecond) / calls
		}
	}
	for _, n := range sizes {
		snap := statusBenchState(b, n)
		for _, st := range []plugins.Status{mods[0], mods[2]} {
			q := &servedQuery{snap: snap, kind: abi.Kind(st.Kind), name: st.Name, match: match, limit: 1000}
			index := msPerCall(func() {
				if _, err := q.run(st, mods); err != nil {
					b.Fatal(err)
				}
			})
			scan := msPerCall(func() {
				vols, err := snap.Volumes(nil)
				if err != nil {
					b.Fatal(err)
				}
				served := 0
				for _, v := range vols {
					if name, ok := match(abi.Kind(st.Kind), targetOf(v)); ok && name == st.Name {
						served++
					}
				}
			})
			b.Run(fmt.Sprintf("volumes=%d/%s", n, st.Name), func(b *testing.B) {
				for b.Loop() {
					figs := testutil.Interleave(rounds, index, scan)
					ix, sc := testutil.SpreadOf(figs[0]), testutil.SpreadOf(figs[1])
					ratio := testutil.SpreadOf(testutil.Ratios(figs[1], figs[0]))
					b.ReportMetric(ix.Median, "index-ms")
					b.ReportMetric(sc.Median, "scan-ms")
					b.Logf("| %d | %s | %s ms | %s ms | %s |", n, st.Name, ix, sc, ratio)
				}
			})
		}
	}
}

// statusBenchState: n volumes over four plugins and two namespaces, a
// hundredth of them "prod/db-*" (a policy's own selector).
func statusBenchState(b *testing.B, n int) *state.Snapshot {
	b.Helper()
	bld := state.NewBuilder()
	pluginIDs := []string{"gcepd", "ebs", "nfs", "ceph"}
	for _, p := range pluginIDs {
		if err := bld.Add(state.TablePlugins, &structs.Plugin{ID: p}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range n {
		ns, prefix := "default", "vol"
		if i%100 == 0 {
			ns, prefix = "prod", "db"
		}
		v := &structs.Volume{Namespace: ns, ID: fmt.Sprintf("%s-%07d", prefix, i), Name: "v", PluginID: pluginIDs[i%len(pluginIDs)],
			ExternalID: fmt.Sprintf("disk-%d", i), AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}
		if err := bld.Add(state.TableVolumes, v); err != nil {
			b.Fatal(err)
		}
	}
	return bld.Store().Snapshot()
}
