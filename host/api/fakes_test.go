package api_test

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/volhost/volhost/host/api"
	"github.com/volhost/volhost/host/state"
	"github.com/volhost/volhost/host/structs"
)

// fakeStore is an in-memory api.Store with blocking-query semantics close
// to host/state's: fn reruns after every write until its index passes
// minIndex. waiting receives once per blocked wait, so a test knows a
// query is parked before it writes.
type fakeStore struct {
	mu        sync.Mutex
	volumes   []*structs.Volume
	allocs    []*structs.Alloc
	nodes     []*structs.Node
	plugins   []*structs.Plugin
	events    []*structs.Event
	leftovers []*structs.Leftover
	index     map[string]uint64
	changed   chan struct{}
	waiting   chan struct{}
	failWith  error
}

func newFakeStore() *fakeStore {
	return &fakeStore{index: map[string]uint64{}, changed: make(chan struct{}), waiting: make(chan struct{}, 16)}
}

// write mutates the fake under its lock, bumps table's index and wakes
// blocked queries.
func (f *fakeStore) write(table string, index uint64, fn func(f *fakeStore)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
	f.index[table] = index
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeStore) Query(ctx context.Context, minIndex uint64, maxWait time.Duration, fn api.QueryFn) (uint64, error) {
	timer := time.NewTimer(maxWait)
	defer timer.Stop()
	for {
		f.mu.Lock()
		if f.failWith != nil {
			f.mu.Unlock()
			return 0, f.failWith
		}
		idx, err := fn(nil, fakeReader{f})
		ch := f.changed
		f.mu.Unlock()
		if err != nil || minIndex == 0 || idx > minIndex {
			return idx, err
		}
		select {
		case f.waiting <- struct{}{}:
		default:
		}
		select {
		case <-ch:
		case <-timer.C:
			return idx, nil
		case <-ctx.Done():
			return idx, ctx.Err()
		}
	}
}

// fakeReader reads the fake; called with its lock held.
type fakeReader struct{ f *fakeStore }

func (r fakeReader) Volumes(memdb.WatchSet) ([]*structs.Volume, error) { return r.f.volumes, nil }

func (r fakeReader) VolumesFrom(_ memdb.WatchSet, ns, id string) (func() *structs.Volume, error) {
	vols := slices.Clone(r.f.volumes)
	slices.SortFunc(vols, func(a, b *structs.Volume) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.ID, b.ID))
	})
	i := 0
	return func() *structs.Volume {
		for ; i < len(vols); i++ {
			if v := vols[i]; v.Namespace > ns || (v.Namespace == ns && v.ID >= id) {
				i++
				return v
			}
		}
		return nil
	}, nil
}
func (r fakeReader) VolumeByID(_ memdb.WatchSet, ns, id string) (*structs.Volume, error) {
	for _, v := range r.f.volumes {
		if v.Namespace == ns && v.ID == id {
			return v, nil
		}
	}
	return nil, nil
}
func (r fakeReader) Allocs(memdb.WatchSet) ([]*structs.Alloc, error) { return r.f.allocs, nil }
func (r fakeReader) AllocByID(_ memdb.WatchSet, id string) (*structs.Alloc, error) {
	for _, a := range r.f.allocs {
		if a.ID == id {
			return a, nil
		}
	}
	return nil, nil
}
func (r fakeReader) Nodes(memdb.WatchSet) ([]*structs.Node, error) { return r.f.nodes, nil }
func (r fakeReader) NodeByID(_ memdb.WatchSet, id string) (*structs.Node, error) {
	for _, n := range r.f.nodes {
		if n.ID == id {
			return n, nil
		}
	}
	return nil, nil
}
func (r fakeReader) Plugins(memdb.WatchSet) ([]*structs.Plugin, error) { return r.f.plugins, nil }
func (r fakeReader) PluginByID(_ memdb.WatchSet, id string) (*structs.Plugin, error) {
	for _, p := range r.f.plugins {
		if p.ID == id {
			return p, nil
		}
	}
	return nil, nil
}

// Generation: the fake is never restored.
func (r fakeReader) Generation() <-chan struct{} { return nil }

// EventsFiltered numbers the fake's events 1.. and applies the filter the
// way the store does (the store's own tests cover the rings).
func (r fakeReader) EventsFiltered(_ memdb.WatchSet, f state.EventFilter) ([]state.EventEntry, uint64, error) {
	var out []state.EventEntry
	for i, e := range r.f.events {
		seq := uint64(i + 1)
		if seq < f.FromSeq || e.Index <= f.SinceIndex || (f.Type != "" && e.Type != f.Type) ||
			(f.VolumeID != "" && (e.VolumeID != f.VolumeID || e.Namespace != f.Namespace)) {
			continue
		}
		if f.Limit > 0 && len(out) == f.Limit {
			return out, seq, nil
		}
		out = append(out, state.EventEntry{Seq: seq, Event: e})
	}
	return out, 0, nil
}

func (r fakeReader) Events(_ memdb.WatchSet, since uint64) ([]*structs.Event, error) {
	var out []*structs.Event
	for _, e := range r.f.events {
		if e.Index > since {
			out = append(out, e)
		}
	}
	return out, nil
}

// The counts the real store keeps in step with its writes, counted here by
// scanning the fake's volumes (host/state's tests hold the real ones to
// the same scan).
func (r fakeReader) VolumeStatsWatch(memdb.WatchSet) (state.VolumeStats, error) {
	st := state.VolumeStats{Claims: map[structs.ClaimState]int{}, ByPlugin: map[string]int{}, ByNamespace: map[string]int{}}
	for _, v := range r.f.volumes {
		st.Volumes++
		st.ByPlugin[v.PluginID]++
		st.ByNamespace[v.Namespace]++
		if v.Stuck != nil {
			st.Stuck++
		}
		for _, c := range v.Claims {
			st.Claims[c.State]++
			if c.LastError != nil {
				st.Failing++
			}
		}
	}
	return st, nil
}

func (r fakeReader) StuckVolumes(ws memdb.WatchSet) ([]*structs.Volume, error) {
	var out []*structs.Volume
	next, _ := r.StuckVolumesFrom(ws, "", "")
	for v := next(); v != nil; v = next() {
		out = append(out, v)
	}
	return out, nil
}

func (r fakeReader) StuckVolumesFrom(ws memdb.WatchSet, ns, id string) (func() *structs.Volume, error) {
	all, _ := r.VolumesFrom(ws, ns, id)
	return func() *structs.Volume {
		for v := all(); v != nil; v = all() {
			if v.Stuck != nil {
				return v
			}
		}
		return nil
	}, nil
}

func (r fakeReader) ClaimedVolumesFrom(ws memdb.WatchSet, ns, id string) (func() *structs.Volume, error) {
	all, _ := r.VolumesFrom(ws, ns, id)
	return func() *structs.Volume {
		for v := all(); v != nil; v = all() {
			if len(v.Claims) > 0 {
				return v
			}
		}
		return nil
	}, nil
}

func (r fakeReader) ClaimCountsByNode(memdb.WatchSet) (map[string]int, error) {
	counts := map[string]int{}
	for _, v := range r.f.volumes {
		for _, c := range v.Claims {
			counts[c.NodeID]++
		}
	}
	return counts, nil
}

func (r fakeReader) Leftovers(memdb.WatchSet) ([]*structs.Leftover, error) { return r.f.leftovers, nil }
func (r fakeReader) Index(table string) (uint64, error)                    { return r.f.index[table], nil }

// call is one recorded Backend call.
type call struct {
	method string
	args   []any
}

// fakeBackend records calls and answers with err (when set) or canned values.
type fakeBackend struct {
	mu        sync.Mutex
	calls     []call
	err       error
	leftovers []*structs.Leftover
	leader    string
	isLeader  bool
}

func (b *fakeBackend) record(method string, args ...any) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls = append(b.calls, call{method, args})
	return b.err
}

func (b *fakeBackend) lastCall() call {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.calls) == 0 {
		return call{}
	}
	return b.calls[len(b.calls)-1]
}

func (b *fakeBackend) methods() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var m []string
	for _, c := range b.calls {
		m = append(m, c.method)
	}
	return strings.Join(m, ",")
}

func (b *fakeBackend) RegisterPlugin(_ context.Context, p *structs.Plugin) (*structs.Plugin, error) {
	if err := b.record("RegisterPlugin", p); err != nil {
		return nil, err
	}
	c := p.Copy()
	c.Capabilities.PublishUnpublish = true
	c.ModifyIndex = 7
	return c, nil
}

func (b *fakeBackend) RegisterNode(_ context.Context, n *structs.Node) (*structs.Node, error) {
	if err := b.record("RegisterNode", n); err != nil {
		return nil, err
	}
	c := n.Copy()
	c.ModifyIndex = 8
	return c, nil
}

func (b *fakeBackend) UpdateNodeStatus(_ context.Context, id string, st structs.NodeStatus) (uint64, error) {
	return 9, b.record("UpdateNodeStatus", id, st)
}

func (b *fakeBackend) FenceNode(_ context.Context, id, reason, accessor string) (uint64, error) {
	return 12, b.record("FenceNode", id, reason, accessor)
}

func (b *fakeBackend) UnfenceNode(_ context.Context, id, accessor string) (uint64, error) {
	return 13, b.record("UnfenceNode", id, accessor)
}

func (b *fakeBackend) DeregisterNode(_ context.Context, id string, force bool) ([]structs.NodeClaim, uint64, error) {
	return nil, 14, b.record("DeregisterNode", id, force)
}

func (b *fakeBackend) DeregisterPlugin(_ context.Context, id string) (uint64, error) {
	return 15, b.record("DeregisterPlugin", id)
}

func (b *fakeBackend) RegisterVolumes(_ context.Context, vols []*structs.Volume) (uint64, error) {
	return 10, b.record("RegisterVolumes", vols)
}

func (b *fakeBackend) DeregisterVolume(_ context.Context, ns, id string, force bool) ([]*structs.Leftover, uint64, error) {
	if err := b.record("DeregisterVolume", ns, id, force); err != nil {
		return nil, 0, err
	}
	return b.leftovers, 11, nil
}

func (b *fakeBackend) ClaimVolume(_ context.Context, req *structs.ClaimRequest) (*structs.Claim, error) {
	if err := b.record("ClaimVolume", req); err != nil {
		return nil, err
	}
	return &structs.Claim{AllocID: req.AllocID, NodeID: req.NodeID, Mode: req.Mode, State: structs.ClaimTaken}, nil
}

func (b *fakeBackend) DetachVolume(_ context.Context, ns, id, node string) (*structs.DetachResult, error) {
	if err := b.record("DetachVolume", ns, id, node); err != nil {
		return nil, err
	}
	return &structs.DetachResult{Namespace: ns, VolumeID: id, NodeID: node, Released: []string{"a1"}}, nil
}

func (b *fakeBackend) UpsertAllocs(_ context.Context, allocs []*structs.Alloc) (uint64, error) {
	return 12, b.record("UpsertAllocs", allocs)
}

func (b *fakeBackend) ClearLeftovers(_ context.Context, ids []string, all bool) (uint64, error) {
	return 13, b.record("ClearLeftovers", slices.Clone(ids), all)
}

func (b *fakeBackend) SystemGC(context.Context) (int, error) {
	return 3, b.record("SystemGC")
}

func (b *fakeBackend) Leader() (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.leader, b.isLeader
}
