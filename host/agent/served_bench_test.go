package agent

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
)

// BenchmarkModuleStatus times `module status NAME`'s served-volume
// answer (servedQuery) against matching every volume (the answer before
// issue 17), for the default policy and for an adapter selecting one
// plugin, at 10,000 and 100,000 volumes over four plugins (and at
// VOLHOST_STATUS_VOLUMES, e.g. 1000000). The index side should not grow
// with the volumes; the scan side does.
//
//	go test -run '^$' -bench '^BenchmarkModuleStatus$' ./host/agent/
func BenchmarkModuleStatus(b *testing.B) {
	sizes := []int{10_000, 100_000}
	if n, err := strconv.Atoi(os.Getenv("VOLHOST_STATUS_VOLUMES")); err == nil && n > 0 {
		sizes = []int{n}
	}
	mods := []plugins.Status{
		{Name: "default-policy", Kind: string(abi.KindReleasePolicy), Default: true},
		{Name: "db-policy", Kind: string(abi.KindReleasePolicy), Volumes: []string{"prod/db-*"}},
		{Name: "ebs-adapter", Kind: string(abi.KindCSIAdapter), PluginIDs: []string{"ebs"}},
	}
	match := rankMatch(mods)
	for _, n := range sizes {
		snap := statusBenchState(b, n)
		for _, st := range []plugins.Status{mods[0], mods[2]} {
			q := &servedQuery{snap: snap, kind: abi.Kind(st.Kind), name: st.Name, match: match, limit: 1000}
			b.Run(fmt.Sprintf("volumes=%d/%s/index", n, st.Name), func(b *testing.B) {
				for b.Loop() {
					if _, err := q.run(st, mods); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("volumes=%d/%s/scan", n, st.Name), func(b *testing.B) {
				for b.Loop() {
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
