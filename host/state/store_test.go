package state

import (
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
)

// Every write type changes what it should, bumps its table index to the
// entry's raft index, and records the events it must.
func TestApplyEveryWriteType(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(f *fixture)
		typ    structs.MessageType
		req    func(f *fixture) any
		tables []string // tables whose index must move to the entry's index
		check  func(t *testing.T, f *fixture, resp any)
	}{
		{
			name: "plugin upsert keeps create index", typ: structs.PluginUpsertType,
			req: func(f *fixture) any {
				return &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "ebs", Version: "2.0.0"}}
			},
			tables: []string{TablePlugins},
			check: func(t *testing.T, f *fixture, _ any) {
				p, _ := f.s.Snapshot().PluginByID(nil, "ebs")
				if p.Version != "2.0.0" || p.CreateIndex != 101 || p.ModifyIndex != f.idx {
					t.Fatalf("plugin %+v", p)
				}
			},
		},
		{
			name: "plugin deregister", typ: structs.PluginDeregisterType,
			setup: func(f *fixture) {
				f.must(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "spare"}})
			},
			req:    func(f *fixture) any { return &structs.PluginDeregisterRequest{PluginID: "spare"} },
			tables: []string{TablePlugins},
			check: func(t *testing.T, f *fixture, _ any) {
				if p, _ := f.s.Snapshot().PluginByID(nil, "spare"); p != nil {
					t.Fatal("plugin still there")
				}
			},
		},
		{
			name: "node upsert new", typ: structs.NodeUpsertType,
			req: func(f *fixture) any {
				return &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n9", Status: structs.NodeReady,
					Plugins: map[string]*structs.NodePlugin{"nfs": {PluginID: "nfs", Endpoint: "unix:///x.sock", ExternalNodeID: "x9"}}}}
			},
			tables: []string{TableNodes},
			check: func(t *testing.T, f *fixture, _ any) {
				n := f.node("n9")
				if n.CreateIndex != f.idx || n.Plugins["nfs"].ExternalNodeID != "x9" {
					t.Fatalf("node %+v", n)
				}
			},
		},
		{
			name: "node upsert down wakes its claimed volumes", typ: structs.NodeUpsertType,
			setup: func(f *fixture) { f.claim("vol-sw", "a1", structs.ClaimWrite) },
			req: func(f *fixture) any {
				n := f.node("n1").Copy()
				n.Status = structs.NodeDown
				return &structs.NodeUpsertRequest{Node: n}
			},
			tables: []string{TableNodes, TableVolumes},
			check: func(t *testing.T, f *fixture, _ any) {
				if v := f.volume("default", "vol-sw"); v.ModifyIndex != f.idx {
					t.Fatalf("vol-sw not bumped: %d", v.ModifyIndex)
				}
			},
		},
		{
			name: "node status", typ: structs.NodeStatusUpdateType,
			req: func(f *fixture) any {
				return &structs.NodeStatusUpdateRequest{NodeID: "n3", Status: structs.NodeDown, LastSeen: t0}
			},
			tables: []string{TableNodes},
			check: func(t *testing.T, f *fixture, _ any) {
				n := f.node("n3")
				if n.Status != structs.NodeDown || !n.LastSeen.Equal(t0) || n.ModifyIndex != f.idx {
					t.Fatalf("node %+v", n)
				}
				if f.index(TableVolumes) == f.idx {
					t.Fatal("no claim on n3, volumes must not move")
				}
			},
		},
		{
			name: "node deregister with terminal claims, forced", typ: structs.NodeDeregisterType,
			setup: func(f *fixture) {
				f.claim("vol-mw", "a2", structs.ClaimWrite)
				f.setAlloc("a2", structs.AllocLost)
			},
			req:    func(f *fixture) any { return &structs.NodeDeregisterRequest{NodeID: "n2", Force: true} },
			tables: []string{TableNodes, TableVolumes},
			check: func(t *testing.T, f *fixture, _ any) {
				if f.node("n2") != nil {
					t.Fatal("node still there")
				}
				if v := f.volume("default", "vol-mw"); v.ModifyIndex != f.idx {
					t.Fatal("claimed volume not bumped")
				}
			},
		},
		{
			name: "volume register and re-register keeps claims", typ: structs.VolumeRegisterType,
			setup: func(f *fixture) { f.claim("vol-mw", "a1", structs.ClaimWrite) },
			req: func(f *fixture) any {
				v := f.volume("default", "vol-mw").Copy()
				v.Claims = nil
				v.Parameters = map[string]string{"iops": "3000"}
				return &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{v,
					{Namespace: "default", ID: "fresh", ExternalID: "e", PluginID: "nfs",
						AccessMode: structs.AccessMultiNodeReader, AttachmentMode: structs.AttachFilesystem}}}
			},
			tables: []string{TableVolumes},
			check: func(t *testing.T, f *fixture, _ any) {
				v := f.volume("default", "vol-mw")
				if v.Parameters["iops"] != "3000" || v.Claims["a1"] == nil || v.CreateIndex == f.idx {
					t.Fatalf("re-registered volume %+v", v)
				}
				if n := f.volume("default", "fresh"); n == nil || n.CreateIndex != f.idx || n.ModifyIndex != f.idx {
					t.Fatalf("new volume %+v", n)
				}
			},
		},
		{
			name: "volume deregister unclaimed", typ: structs.VolumeDeregisterType,
			req: func(f *fixture) any {
				return &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-ro"}
			},
			tables: []string{TableVolumes},
			check: func(t *testing.T, f *fixture, resp any) {
				if f.volume("default", "vol-ro") != nil || resp != nil {
					t.Fatalf("volume still there or leftovers %v", resp)
				}
			},
		},
		{
			name: "alloc upsert terminal wakes claimed volumes", typ: structs.AllocUpsertType,
			setup: func(f *fixture) {
				f.claim("vol-mw", "a1", structs.ClaimWrite)
				f.claim("vol-sw", "a1", structs.ClaimWrite)
				f.claim("vol-ms", "a2", structs.ClaimWrite)
			},
			req: func(f *fixture) any {
				a := f.alloc("a1").Copy()
				a.ClientStatus = structs.AllocComplete
				return &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{a, {ID: "a7", NodeID: "n3", ClientStatus: structs.AllocPending}}}
			},
			tables: []string{TableAllocs, TableVolumes},
			check: func(t *testing.T, f *fixture, _ any) {
				for id, want := range map[string]bool{"vol-mw": true, "vol-sw": true, "vol-ms": false, "vol-ro": false} {
					if got := f.volume("default", id).ModifyIndex == f.idx; got != want {
						t.Errorf("%s bumped=%v, want %v", id, got, want)
					}
				}
				if a := f.alloc("a7"); a == nil || a.CreateIndex != f.idx || !a.ModifyTime.Equal(t0) {
					t.Fatalf("new alloc %+v", a)
				}
			},
		},
		{
			name: "alloc delete wakes claimed volumes", typ: structs.AllocDeleteType,
			setup: func(f *fixture) {
				f.claim("vol-mw", "a2", structs.ClaimWrite)
				f.setAlloc("a2", structs.AllocFailed)
			},
			req:    func(f *fixture) any { return &structs.AllocDeleteRequest{AllocIDs: []string{"a2", "a3"}} },
			tables: []string{TableAllocs, TableVolumes},
			check: func(t *testing.T, f *fixture, _ any) {
				if f.alloc("a2") != nil || f.alloc("a3") != nil {
					t.Fatal("allocs still there")
				}
				if f.volume("default", "vol-mw").ModifyIndex != f.idx {
					t.Fatal("volume not bumped")
				}
			},
		},
		{
			name: "claim defaults modes and times", typ: structs.VolumeClaimType,
			req: func(f *fixture) any {
				return &structs.VolumeClaimRequest{Namespace: "default", VolumeID: "vol-ms", Claim: &structs.Claim{
					AllocID: "a1", NodeID: "n1", Mode: structs.ClaimWrite, PublishContext: map[string]string{"dev": "/dev/xvdb"}}}
			},
			tables: []string{TableVolumes, TableEvents},
			check: func(t *testing.T, f *fixture, _ any) {
				c := f.volume("default", "vol-ms").Claims["a1"]
				if c.State != structs.ClaimTaken || c.AccessMode != structs.AccessMultiNodeSingleWrite ||
					c.AttachmentMode != structs.AttachBlockDevice || c.CreateIndex != f.idx || !c.CreateTime.Equal(t0) ||
					c.PublishContext["dev"] != "/dev/xvdb" {
					t.Fatalf("claim %+v", c)
				}
				evs := f.events()
				if e := evs[len(evs)-1]; e.Type != structs.EventClaimTransition || e.AllocID != "a1" || e.Index != f.idx {
					t.Fatalf("event %+v", e)
				}
			},
		},
		{
			name: "claim remove", typ: structs.VolumeClaimRemoveType,
			setup: func(f *fixture) { f.publishing("vol-sw", "a1", structs.ClaimWrite) },
			req: func(f *fixture) any {
				return &structs.VolumeClaimRemoveRequest{Namespace: "default", VolumeID: "vol-sw", AllocID: "a1", ModifyIndex: f.idx}
			},
			tables: []string{TableVolumes, TableEvents},
			check: func(t *testing.T, f *fixture, _ any) {
				if v := f.volume("default", "vol-sw"); v.Claims != nil || v.InUse() {
					t.Fatalf("claim still there: %+v", v.Claims)
				}
			},
		},
		{
			name: "checkpoint failed attempt stays", typ: structs.ClaimCheckpointType,
			setup: func(f *fixture) { f.claim("vol-sw", "a1", structs.ClaimWrite); f.setAlloc("a1", structs.AllocComplete) },
			req: func(f *fixture) any {
				c := f.volume("default", "vol-sw").Claims["a1"].Copy()
				c.Attempts = 1
				c.NextAttempt = t0.Add(time.Second)
				c.LastError = &structs.ClaimError{Kind: structs.ErrorCSI, Step: "node-unpublish", Code: 14, CodeName: "Unavailable", Message: "down"}
				return &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: c}
			},
			tables: []string{TableVolumes, TableEvents},
			check: func(t *testing.T, f *fixture, _ any) {
				c := f.volume("default", "vol-sw").Claims["a1"]
				if c.State != structs.ClaimTaken || c.Attempts != 1 || c.LastError.Code != 14 || c.ModifyIndex != f.idx || c.CreateIndex == f.idx {
					t.Fatalf("claim %+v", c)
				}
				evs := f.events()
				if e := evs[len(evs)-1]; e.Type != structs.EventClaimFailed || e.Fields["code"] != "Unavailable" {
					t.Fatalf("event %+v", e)
				}
			},
		},
		{
			name: "checkpoint forward to node-detached", typ: structs.ClaimCheckpointType,
			setup: func(f *fixture) { f.claim("vol-sw", "a1", structs.ClaimWrite); f.setAlloc("a1", structs.AllocComplete) },
			req: func(f *fixture) any {
				c := f.volume("default", "vol-sw").Claims["a1"].Copy()
				c.State = structs.ClaimNodeDetached
				return &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: c}
			},
			tables: []string{TableVolumes, TableEvents},
			check: func(t *testing.T, f *fixture, _ any) {
				v := f.volume("default", "vol-sw")
				if v.Claims["a1"].State != structs.ClaimNodeDetached || !v.InUse() {
					t.Fatalf("claim %+v", v.Claims["a1"])
				}
			},
		},
		{
			name: "checkpoint ready-to-free removes claim and clears stuck", typ: structs.ClaimCheckpointType,
			setup: func(f *fixture) {
				f.claim("vol-sw", "a1", structs.ClaimWrite)
				f.setAlloc("a1", structs.AllocComplete)
				f.must(structs.VolumeStuckType, &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "vol-sw", Stuck: &structs.Stuck{Reason: "r"}})
			},
			req: func(f *fixture) any {
				c := f.volume("default", "vol-sw").Claims["a1"].Copy()
				c.State = structs.ClaimReadyToFree
				return &structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: "vol-sw", Claim: c}
			},
			tables: []string{TableVolumes, TableEvents},
			check: func(t *testing.T, f *fixture, _ any) {
				v := f.volume("default", "vol-sw")
				if v.Claims != nil || v.Stuck != nil || v.ModifyIndex != f.idx {
					t.Fatalf("volume %+v", v)
				}
			},
		},
		{
			name: "mark stuck", typ: structs.VolumeStuckType,
			req: func(f *fixture) any {
				return &structs.VolumeStuckRequest{Namespace: "default", VolumeID: "vol-mw",
					Stuck: &structs.Stuck{Reason: "max attempts", Attempts: 9, CodeName: "Internal", Module: "policy"}}
			},
			tables: []string{TableVolumes, TableEvents},
			check: func(t *testing.T, f *fixture, _ any) {
				v := f.volume("default", "vol-mw")
				if v.Stuck == nil || v.Stuck.Reason != "max attempts" || !v.Stuck.Since.Equal(t0) {
					t.Fatalf("stuck %+v", v.Stuck)
				}
				evs := f.events()
				if e := evs[len(evs)-1]; e.Type != structs.EventVolumeStuck || e.Module != "policy" || e.Fields["code"] != "Internal" {
					t.Fatalf("event %+v", e)
				}
			},
		},
		{
			name: "gc bumps named volumes only, skipping gone ones", typ: structs.ClaimGCType,
			req: func(f *fixture) any {
				return &structs.ClaimGCRequest{Volumes: []structs.VolumeRef{{Namespace: "default", ID: "vol-sw"}, {Namespace: "default", ID: "gone"}}}
			},
			tables: []string{TableVolumes, TableEvents},
			check: func(t *testing.T, f *fixture, _ any) {
				vols, _ := f.s.Snapshot().VolumesModifiedSince(nil, f.idx-1)
				if len(vols) != 1 || vols[0].ID != "vol-sw" {
					t.Fatalf("moved volumes %v", vols)
				}
				evs := f.events()
				if e := evs[len(evs)-1]; e.Type != structs.EventGC || e.Fields["volumes"] != "1" {
					t.Fatalf("event %+v", e)
				}
			},
		},
		{
			name: "leftovers clear by id", typ: structs.LeftoversClearType,
			setup: func(f *fixture) {
				f.claim("vol-mw", "a1", structs.ClaimWrite)
				f.claim("vol-mw", "a2", structs.ClaimWrite)
				f.setAlloc("a1", structs.AllocComplete)
				f.setAlloc("a2", structs.AllocComplete)
				f.must(structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-mw", Force: true})
			},
			req:    func(f *fixture) any { return &structs.LeftoversClearRequest{IDs: []string{"default/vol-mw/a1"}} },
			tables: []string{TableLeftovers},
			check: func(t *testing.T, f *fixture, _ any) {
				ls, _ := f.s.Snapshot().Leftovers(nil)
				if len(ls) != 1 || ls[0].AllocID != "a2" {
					t.Fatalf("leftovers %+v", ls)
				}
			},
		},
		{
			name: "events append", typ: structs.EventAppendType,
			req: func(f *fixture) any {
				return &structs.EventAppendRequest{Events: []*structs.Event{{Type: structs.EventModule, Module: "m", Message: "loaded"}}}
			},
			tables: []string{TableEvents},
			check: func(t *testing.T, f *fixture, _ any) {
				evs, _ := f.s.Snapshot().Events(nil, f.idx-1)
				if len(evs) != 1 || evs[0].Module != "m" || evs[0].Index != f.idx || !evs[0].Time.Equal(t0) {
					t.Fatalf("events %+v", evs)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.setup != nil {
				tc.setup(f)
			}
			req := tc.req(f)
			if err := f.s.Snapshot().Validate(tc.typ, req); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			resp := f.must(tc.typ, req)
			for _, table := range tc.tables {
				if got := f.index(table); got != f.idx {
					t.Errorf("index of %s = %d, want %d", table, got, f.idx)
				}
			}
			if f.s.LatestIndex() != f.idx {
				t.Errorf("LatestIndex = %d, want %d", f.s.LatestIndex(), f.idx)
			}
			tc.check(t, f, resp)
			checkStats(t, f.s)
		})
	}
}

// Objects read from the store are never mutated by later writes.
func TestReadObjectsAreNotMutated(t *testing.T) {
	f := newFixture(t)
	f.claim("vol-sw", "a1", structs.ClaimWrite)
	before := f.volume("default", "vol-sw")
	keep := before.Copy()
	f.setAlloc("a1", structs.AllocComplete)
	if err := f.checkpoint("vol-sw", "a1", structs.ClaimNodeDetached); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before, keep) {
		t.Fatal("a write changed an object a reader held")
	}
}

// A write claim counts until ready-to-free: a second writer on a
// single-writer volume is refused through every release state and accepted
// only once the first claim is freed (hashicorp/nomad#8609: a replacement
// placed before the controller detach finished).
func TestWriterHeldUntilReadyToFree(t *testing.T) {
	for _, mode := range []string{"vol-sw", "vol-ms"} {
		t.Run(mode, func(t *testing.T) {
			f := newFixture(t)
			f.claim(mode, "a1", structs.ClaimWrite)
			second := &structs.VolumeClaimRequest{Namespace: "default", VolumeID: mode,
				Claim: &structs.Claim{AllocID: "a5", NodeID: "n1", Mode: structs.ClaimWrite}}
			f.setAlloc("a1", structs.AllocComplete)
			for _, st := range []structs.ClaimState{structs.ClaimTaken, structs.ClaimNodeDetached, structs.ClaimControllerDetached} {
				if st != structs.ClaimTaken {
					if err := f.checkpoint(mode, "a1", st); err != nil {
						t.Fatal(err)
					}
				}
				if _, err := f.apply(structs.VolumeClaimType, second); errKind(err) != "conflict" {
					t.Fatalf("at %s: second writer got %v, want conflict", st, err)
				}
			}
			if err := f.checkpoint(mode, "a1", structs.ClaimReadyToFree); err != nil {
				t.Fatal(err)
			}
			f.must(structs.VolumeClaimType, second)
		})
	}
}

func TestReadersShareMultiWriterAllowsMany(t *testing.T) {
	f := newFixture(t)
	f.claim("vol-ro", "a1", structs.ClaimRead)
	f.claim("vol-ro", "a2", structs.ClaimRead)
	f.claim("vol-mw", "a1", structs.ClaimWrite)
	f.claim("vol-mw", "a2", structs.ClaimWrite)
	f.claim("vol-sw", "a1", structs.ClaimRead)
	f.claim("vol-sw", "a5", structs.ClaimWrite) // same node
	if n := len(f.volume("default", "vol-mw").Allocs(structs.ClaimWrite)); n != 2 {
		t.Fatalf("writers %d", n)
	}
}

// Only volumes whose index moved are returned, in index order.
func TestVolumesModifiedSince(t *testing.T) {
	f := newFixture(t)
	mark := f.idx
	f.claim("vol-sw", "a1", structs.ClaimWrite)
	f.claim("vol-ro", "a2", structs.ClaimRead)
	f.must(structs.ClaimGCType, &structs.ClaimGCRequest{Volumes: []structs.VolumeRef{{Namespace: "default", ID: "vol-sw"}}})
	snap := f.s.Snapshot()
	vols, err := snap.VolumesModifiedSince(nil, mark)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vols {
		got = append(got, v.ID)
	}
	if want := []string{"vol-ro", "vol-sw"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if vols, _ := snap.VolumesModifiedSince(nil, f.idx); len(vols) != 0 {
		t.Fatalf("nothing moved after %d, got %d volumes", f.idx, len(vols))
	}
	all, _ := snap.VolumesModifiedSince(nil, 0)
	if len(all) != 5 {
		t.Fatalf("since 0: %d volumes, want 5", len(all))
	}
}

// Alloc-terminal, alloc-delete, node-down and node-deregister bump exactly
// the volumes claimed by that alloc / on that node.
func TestWakeClaimedVolumes(t *testing.T) {
	tests := []struct {
		name  string
		write func(f *fixture)
		moved []string
	}{
		{"alloc terminal", func(f *fixture) { f.setAlloc("a1", structs.AllocFailed) }, []string{"vol-mw", "vol-sw"}},
		{"alloc still running", func(f *fixture) { f.setAlloc("a1", structs.AllocRunning) }, nil},
		{"node down", func(f *fixture) {
			f.must(structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{NodeID: "n2", Status: structs.NodeDown})
		}, []string{"vol-mw", "vol-ro"}},
		{"node heartbeat without change", func(f *fixture) {
			f.must(structs.NodeStatusUpdateType, &structs.NodeStatusUpdateRequest{NodeID: "n2", Status: structs.NodeReady, LastSeen: t0})
		}, nil},
		{"node deregistered", func(f *fixture) {
			f.setAlloc("a2", structs.AllocLost)
			f.must(structs.NodeDeregisterType, &structs.NodeDeregisterRequest{NodeID: "n2", Force: true})
		}, []string{"vol-mw", "vol-ro"}},
		{"alloc deleted", func(f *fixture) {
			f.setAlloc("a2", structs.AllocComplete)
			f.must(structs.AllocDeleteType, &structs.AllocDeleteRequest{AllocIDs: []string{"a2"}})
		}, []string{"vol-mw", "vol-ro"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.claim("vol-sw", "a1", structs.ClaimWrite)
			f.claim("vol-mw", "a1", structs.ClaimWrite)
			f.claim("vol-mw", "a2", structs.ClaimWrite)
			f.claim("vol-ro", "a2", structs.ClaimRead)
			mark := f.idx
			tc.write(f)
			vols, err := f.s.Snapshot().VolumesModifiedSince(nil, mark)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range vols {
				got = append(got, v.ID)
			}
			sort.Strings(got)
			if !reflect.DeepEqual(got, tc.moved) {
				t.Fatalf("moved %v, want %v", got, tc.moved)
			}
		})
	}
}

func TestReleasableVolumes(t *testing.T) {
	f := newFixture(t)
	f.claim("vol-sw", "a1", structs.ClaimWrite)
	f.claim("vol-mw", "a1", structs.ClaimWrite)
	f.claim("vol-mw", "a2", structs.ClaimWrite)
	f.claim("vol-ro", "a2", structs.ClaimRead)
	f.claim("vol-ms", "a5", structs.ClaimWrite)
	f.setAlloc("a2", structs.AllocComplete)
	f.setAlloc("a5", structs.AllocComplete)
	f.must(structs.AllocDeleteType, &structs.AllocDeleteRequest{AllocIDs: []string{"a5"}}) // gone counts too
	got, err := f.s.Reader().ReleasableVolumes()
	if err != nil {
		t.Fatal(err)
	}
	want := []structs.VolumeRef{{Namespace: "default", ID: "vol-ms"}, {Namespace: "default", ID: "vol-mw"}, {Namespace: "default", ID: "vol-ro"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// Forced deregistration is refused while a claimed alloc is live, allowed
// when every claimed alloc is terminal or gone, makes no CSI call (the store
// has none) and keeps one leftover per unreleased claim.
func TestForceDeregisterLeftovers(t *testing.T) {
	f := newFixture(t)
	f.claim("vol-mw", "a1", structs.ClaimWrite)
	f.claim("vol-mw", "a2", structs.ClaimWrite)
	req := &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-mw", Force: true, Reason: "operator", Time: t0.Add(time.Hour)}
	if _, err := f.apply(structs.VolumeDeregisterType, req); errKind(err) != "conflict" {
		t.Fatalf("live allocs: got %v", err)
	}
	f.setAlloc("a1", structs.AllocComplete)
	if err := f.checkpoint("vol-mw", "a1", structs.ClaimNodeDetached); err != nil {
		t.Fatal(err)
	}
	f.setAlloc("a2", structs.AllocComplete)
	f.must(structs.AllocDeleteType, &structs.AllocDeleteRequest{AllocIDs: []string{"a2"}})
	resp := f.must(structs.VolumeDeregisterType, req)
	got, ok := resp.([]*structs.Leftover)
	if !ok || len(got) != 2 {
		t.Fatalf("response %#v", resp)
	}
	// a1 is node-detached with no answer recorded: its release may have
	// sent ControllerUnpublish, which may still run (Claim.DetachInDoubt).
	want := []*structs.Leftover{
		{ID: "default/vol-mw/a1", Namespace: "default", VolumeID: "vol-mw", ExternalID: "vol-0bbb", PluginID: "ebs", AllocID: "a1",
			NodeID: "n1", ExternalNodeID: "ext-n1", State: structs.ClaimNodeDetached, InDoubt: "ControllerUnpublishVolume", Reason: "operator", Time: t0.Add(time.Hour), CreateIndex: f.idx},
		{ID: "default/vol-mw/a2", Namespace: "default", VolumeID: "vol-mw", ExternalID: "vol-0bbb", PluginID: "ebs", AllocID: "a2",
			NodeID: "n2", ExternalNodeID: "ext-n2", State: structs.ClaimTaken, Reason: "operator", Time: t0.Add(time.Hour), CreateIndex: f.idx},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("leftovers\n got %+v\nwant %+v", got, want)
	}
	listed, _ := f.s.Snapshot().Leftovers(nil)
	if !reflect.DeepEqual(listed, want) {
		t.Fatalf("listed leftovers %+v", listed)
	}
	if f.volume("default", "vol-mw") != nil {
		t.Fatal("volume still registered")
	}
	evs := f.events()
	if e := evs[len(evs)-1]; e.Type != structs.EventForceDeregister || e.Fields["leftovers"] != "2" {
		t.Fatalf("event %+v", e)
	}
	f.must(structs.LeftoversClearType, &structs.LeftoversClearRequest{All: true})
	if l, _ := f.s.Snapshot().Leftovers(nil); len(l) != 0 {
		t.Fatalf("leftovers after clear: %v", l)
	}
}

func TestEscapeHatchEventType(t *testing.T) {
	f := newFixture(t)
	f.claim("vol-sw", "a1", structs.ClaimWrite)
	f.setAlloc("a1", structs.AllocComplete)
	f.must(structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{Namespace: "default", VolumeID: "vol-sw", Force: true, Reason: "escape-hatch"})
	evs := f.events()
	if e := evs[len(evs)-1]; e.Type != structs.EventAutoForce {
		t.Fatalf("event %+v", e)
	}
}

// The events table keeps the newest MaxEvents events, however they arrive.
func TestEventsBounded(t *testing.T) {
	f := newFixture(t, WithMaxEvents(5))
	for i := 0; i < 4; i++ {
		f.must(structs.EventAppendType, &structs.EventAppendRequest{Events: []*structs.Event{
			{Type: structs.EventModule, Message: "x"}, {Type: structs.EventModule, Message: "y"}, {Type: structs.EventModule, Message: "z"}}})
	}
	evs := f.events()
	if len(evs) != 5 {
		t.Fatalf("%d events kept, want 5", len(evs))
	}
	if evs[4].Index != f.idx || evs[4].Message != "z" || evs[0].Message != "y" || evs[0].Index != f.idx-1 {
		t.Fatalf("kept the wrong events: first %+v last %+v", evs[0], evs[4])
	}
	since, _ := f.s.Snapshot().Events(nil, f.idx-1)
	if len(since) != 3 {
		t.Fatalf("events since %d: %d", f.idx-1, len(since))
	}
}
