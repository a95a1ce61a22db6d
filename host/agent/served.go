package agent

import (
	"cmp"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/volhost/volhost/abi"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/plugins"
)

// servedQuery answers "what does module NAME serve" (`volhost module
// status NAME`) without matching every volume (a scan per request;
// BenchmarkModuleStatus). plugins.Manager.Match ranks a
// module's volume selectors over its plugin patterns over a default, so:
//
//   - a volume no volume selector names is served by the owner of its
//     plugin (the first-named module whose pattern matches the plugin ID,
//     else the first-named default), which depends on the plugin alone:
//     such volumes are counted from the store's per-plugin counts and
//     listed through the (plugin, external ID) index;
//   - the volumes some module's volume selector may name (walked through
//     the ID index from the selector's literal prefix) are judged one by
//     one by Match itself, and correct the counts.
//
// A request costs the plugins times the modules, the selected volumes and
// one page, not the table. A selector whose namespace starts with a
// wildcard ("*/db") makes the walk visit every volume: correct, only
// slower.
type servedQuery struct {
	snap  *state.Snapshot
	kind  abi.Kind
	name  string
	match func(abi.Kind, plugins.Target) (string, bool)
	limit int
}

// servedResult is what servedQuery finds.
type servedResult struct {
	count int
	// volumes: the first limit in the (plugin, external ID) index's
	// order, which a page can be read from without sorting them all;
	// given sorted by namespace and ID.
	volumes   []structs.VolumeRef
	truncated bool
	plugins   []string
}

// run computes the result for module st, given every module's status.
func (q *servedQuery) run(st plugins.Status, all []plugins.Status) (*servedResult, error) {
	if st.Kind == "" {
		return &servedResult{}, nil // no serving generation: Match never picks it
	}
	var mods []plugins.Status
	for _, m := range all {
		if m.Kind == st.Kind {
			mods = append(mods, m)
		}
	}
	stats, err := q.snap.VolumeStats()
	if err != nil {
		return nil, err
	}
	pluginIDs, err := q.snap.VolumePluginIDs()
	if err != nil {
		return nil, err
	}
	owned := map[string]bool{} // plugins whose unselected volumes go to st
	for _, p := range pluginIDs {
		owned[p] = pluginOwner(mods, p) == st.Name
	}

	// The volumes a selector may name: Match decides each.
	in := map[structs.VolumeRef]*structs.Volume{} // selected and served by st
	out := map[structs.VolumeRef]bool{}           // of an owned plugin, but served by another
	lost := map[string]int{}                      // out, by plugin
	for _, m := range mods {
		for _, sel := range m.Volumes {
			ns, id, _ := strings.Cut(sel, "/")
			err := q.walkSelector(ns, id, func(v *structs.Volume) {
				ref := structs.VolumeRef{Namespace: v.Namespace, ID: v.ID}
				name, ok := q.match(q.kind, targetOf(v))
				switch served := ok && name == st.Name; {
				case served && !owned[v.PluginID]:
					in[ref] = v
				case !served && owned[v.PluginID] && !out[ref]:
					out[ref] = true
					lost[v.PluginID]++
				}
			})
			if err != nil {
				return nil, err
			}
		}
	}

	res := &servedResult{count: len(in)}
	pluginSet := map[string]bool{}
	var walks []func() *structs.Volume
	for _, p := range pluginIDs {
		if !owned[p] {
			continue
		}
		n := stats.ByPlugin[p] - lost[p]
		res.count += n
		if n > 0 {
			pluginSet[p] = true
		}
		next, err := q.snap.VolumesOfPlugin(p)
		if err != nil {
			return nil, err
		}
		walks = append(walks, next)
	}
	for _, v := range in {
		pluginSet[v.PluginID] = true
	}
	res.plugins = slices.Sorted(maps.Keys(pluginSet))
	res.volumes = firstServed(walks, in, out, q.limit)
	res.truncated = res.count > len(res.volumes)
	return res, nil
}

// pluginOwner is who serves plugin p's volumes that no volume selector
// names: Match's rank 2 (a plugin pattern) over rank 1 (default), the
// first name on a tie.
func pluginOwner(mods []plugins.Status, p string) string {
	byPattern, byDefault := "", ""
	for _, m := range mods {
		switch {
		case slices.ContainsFunc(m.PluginIDs, func(pat string) bool { return globMatch(pat, p) }):
			if byPattern == "" || m.Name < byPattern {
				byPattern = m.Name
			}
		case m.Default:
			if byDefault == "" || m.Name < byDefault {
				byDefault = m.Name
			}
		}
	}
	return cmp.Or(byPattern, byDefault)
}

// firstServed merges the owned plugins' volumes (each walk in the order
// of the store's (plugin, external ID) index), less out, with in, and
// returns the first limit in that order, sorted by namespace and ID.
func firstServed(walks []func() *structs.Volume, in map[structs.VolumeRef]*structs.Volume, out map[structs.VolumeRef]bool, limit int) []structs.VolumeRef {
	extra := make([]*structs.Volume, 0, len(in))
	for _, v := range in {
		extra = append(extra, v)
	}
	slices.SortFunc(extra, compareDisks)
	heads := make([]*structs.Volume, len(walks))
	advance := func(i int) {
		for v := walks[i](); ; v = walks[i]() {
			if v == nil || !out[refOf(v)] {
				heads[i] = v
				return
			}
		}
	}
	for i := range walks {
		advance(i)
	}
	var page []structs.VolumeRef
	for len(page) < limit {
		best := -1
		for i, h := range heads {
			if h != nil && (best < 0 || compareDisks(h, heads[best]) < 0) {
				best = i
			}
		}
		switch {
		case best < 0 && len(extra) == 0:
			slices.SortFunc(page, compareRefs)
			return page
		case best < 0 || (len(extra) > 0 && compareDisks(extra[0], heads[best]) < 0):
			page, extra = append(page, refOf(extra[0])), extra[1:]
		default:
			page = append(page, refOf(heads[best]))
			advance(best)
		}
	}
	slices.SortFunc(page, compareRefs)
	return page
}

// compareDisks is the order of the (plugin, external ID) index, whose
// entries end with the volume's key.
func compareDisks(a, b *structs.Volume) int {
	return cmp.Or(cmp.Compare(a.PluginID, b.PluginID), cmp.Compare(a.ExternalID, b.ExternalID),
		compareRefs(refOf(a), refOf(b)))
}

// walkSelector visits the volumes whose (namespace, ID) match the glob
// pair, walking the ID index from the pair's literal prefix.
func (q *servedQuery) walkSelector(nsGlob, idGlob string, visit func(*structs.Volume)) error {
	nsPrefix, nsLiteral := literalPrefix(nsGlob)
	idPrefix := ""
	if nsLiteral {
		idPrefix, _ = literalPrefix(idGlob)
	}
	next, err := q.snap.VolumesFrom(nil, nsPrefix, idPrefix)
	if err != nil {
		return err
	}
	for v := next(); v != nil; v = next() {
		switch {
		case nsLiteral && (v.Namespace != nsGlob || !strings.HasPrefix(v.ID, idPrefix)):
			return nil
		case !nsLiteral && !strings.HasPrefix(v.Namespace, nsPrefix):
			return nil
		}
		if globMatch(nsGlob, v.Namespace) && globMatch(idGlob, v.ID) {
			visit(v)
		}
	}
	return nil
}

// globMatch matches as the manifest's selectors do (path.Match; the
// patterns were validated when the manifest was parsed).
func globMatch(pattern, s string) bool {
	ok, _ := path.Match(pattern, s)
	return ok
}

// literalPrefix is the part of a path.Match pattern before its first
// special character, and whether the pattern has none.
func literalPrefix(glob string) (string, bool) {
	if i := strings.IndexAny(glob, `*?[\`); i >= 0 {
		return glob[:i], false
	}
	return glob, true
}

func refOf(v *structs.Volume) structs.VolumeRef {
	return structs.VolumeRef{Namespace: v.Namespace, ID: v.ID}
}

func compareRefs(a, b structs.VolumeRef) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.ID, b.ID))
}
