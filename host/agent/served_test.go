package agent

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
)

// rankMatch is plugins.Manager.Match's rule over statuses (volume selector
// 3, plugin pattern 2, default 1, ties by name), so the test can draw
// many module sets without loading Wasm; TestModuleStatusCountsServedVolumes
// checks the real manager.
func rankMatch(mods []plugins.Status) func(abi.Kind, plugins.Target) (string, bool) {
	return func(kind abi.Kind, t plugins.Target) (string, bool) {
		best, bestRank := "", 0
		for _, m := range mods {
			if m.Kind != string(kind) {
				continue
			}
			rank := 0
			switch {
			case slices.ContainsFunc(m.Volumes, func(sel string) bool {
				ns, id, _ := strings.Cut(sel, "/")
				return globMatch(ns, t.Namespace) && globMatch(id, t.VolumeID)
			}):
				rank = 3
			case t.PluginID != "" && slices.ContainsFunc(m.PluginIDs, func(p string) bool { return globMatch(p, t.PluginID) }):
				rank = 2
			case m.Default:
				rank = 1
			}
			if rank > bestRank || (rank == bestRank && rank > 0 && m.Name < best) {
				best, bestRank = m.Name, rank
			}
		}
		return best, bestRank > 0
	}
}

// TestServedQueryAgreesWithAScan: for random volumes and module sets, what
// the index walk finds is exactly what matching every volume finds:
// count, first page in ID order, truncation and plugins.
func TestServedQueryAgreesWithAScan(t *testing.T) {
	namespaces := []string{"default", "prod", "prod-eu", "team-a"}
	pluginIDs := []string{"gcepd", "ebs", "ebs-io2", "nfs"}
	volumeSelectors := []string{"prod/*", "default/db-*", "team-?/*", "*/cache-1", "prod-eu/web-[0-4]", "default/db-10", "*/*"}
	pluginPatterns := []string{"ebs*", "nfs", "gce?d", "zzz"}

	rng := rand.New(rand.NewPCG(17, 1))
	for round := range 60 {
		b := state.NewBuilder()
		for _, p := range pluginIDs {
			must(t, b.Add(state.TablePlugins, &structs.Plugin{ID: p}))
		}
		n := rng.IntN(300)
		for i := range n {
			v := &structs.Volume{
				Namespace: namespaces[rng.IntN(len(namespaces))],
				ID:        fmt.Sprintf("%s-%d", []string{"db", "web", "cache"}[rng.IntN(3)], i),
				PluginID:  pluginIDs[rng.IntN(len(pluginIDs))],
				Name:      "v", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem,
			}
			v.ExternalID = "disk-" + v.Namespace + "-" + v.ID
			must(t, b.Add(state.TableVolumes, v))
		}
		snap := b.Store().Snapshot()

		var mods []plugins.Status
		for m := range 1 + rng.IntN(4) {
			st := plugins.Status{Name: fmt.Sprintf("m%d", m), Kind: string(abi.KindReleasePolicy)}
			if rng.IntN(2) == 0 {
				st.Volumes = []string{volumeSelectors[rng.IntN(len(volumeSelectors))]}
			}
			if rng.IntN(2) == 0 {
				st.PluginIDs = []string{pluginPatterns[rng.IntN(len(pluginPatterns))]}
			}
			mods = append(mods, st)
		}
		mods[rng.IntN(len(mods))].Default = true
		if rng.IntN(5) == 0 {
			mods = append(mods, plugins.Status{Name: "adapter", Kind: string(abi.KindCSIAdapter), Default: true})
		}
		if rng.IntN(8) == 0 {
			mods[0].Default = true // two defaults: the scan fallback
		}
		match := rankMatch(mods)
		limit := 1 + rng.IntN(40)

		for _, st := range mods {
			t.Run(fmt.Sprintf("round%d/%s", round, st.Name), func(t *testing.T) {
				q := &servedQuery{snap: snap, kind: abi.Kind(st.Kind), name: st.Name, match: match, limit: limit}
				got, err := q.run(st, mods)
				if err != nil {
					t.Fatal(err)
				}
				want := scanServed(t, snap, match, st, limit)
				if got.count != want.count || got.truncated != want.truncated ||
					!slices.Equal(got.volumes, want.volumes) || !slices.Equal(got.plugins, want.plugins) {
					t.Fatalf("modules %+v, limit %d:\n got %d %v truncated=%v plugins %v\nwant %d %v truncated=%v plugins %v",
						mods, limit, got.count, got.volumes, got.truncated, got.plugins, want.count, want.volumes, want.truncated, want.plugins)
				}
			})
		}
	}
}

// scanServed is the definition: Match asked about every volume.
func scanServed(t *testing.T, snap *state.Snapshot, match func(abi.Kind, plugins.Target) (string, bool), st plugins.Status, limit int) *servedResult {
	t.Helper()
	vols, err := snap.Volumes(nil)
	if err != nil {
		t.Fatal(err)
	}
	res := &servedResult{}
	seen := map[string]bool{}
	var served []*structs.Volume
	for _, v := range vols {
		if name, ok := match(abi.Kind(st.Kind), targetOf(v)); ok && name == st.Name {
			served = append(served, v)
			seen[v.PluginID] = true
		}
	}
	res.count = len(served)
	// The page is the first limit by (plugin, external ID), sorted by ID.
	slices.SortFunc(served, compareDisks)
	for _, v := range served[:min(limit, len(served))] {
		res.volumes = append(res.volumes, refOf(v))
	}
	slices.SortFunc(res.volumes, compareRefs)
	res.truncated = res.count > len(res.volumes)
	res.plugins = slices.Sorted(maps.Keys(seen))
	return res
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
