package state

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// checkVolumeMods fails t unless the volume_mods rows of s keep their
// invariants (every volume with an index is listed in that index's row; a
// row's live count is exact, above zero and at least half its refs; refs
// sorted and unique) and VolumesModifiedSince answers, for every index at
// which the answer changes, exactly what a scan of the table answers.
func checkVolumeMods(t *testing.T, s *Store, when string) {
	t.Helper()
	checkClaims(t, s, when)
	snap := s.Snapshot()
	all, err := snap.Volumes(nil)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[structs.VolumeRef]uint64{}
	it, err := snap.txn.Get(tableVolumeMods, indexID)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[structs.VolumeRef]*structs.Volume{}
	for _, v := range all {
		byKey[structs.VolumeRef{Namespace: v.Namespace, ID: v.ID}] = v
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		row := raw.(*volumeModsRow)
		live := 0
		for i, ref := range row.Refs {
			if i > 0 && compareRefs(row.Refs[i-1], ref) >= 0 {
				t.Fatalf("%s: row %d: refs out of order or repeated at %d: %v", when, row.Index, i, row.Refs)
			}
			if v := byKey[ref]; v != nil && v.ModifyIndex == row.Index {
				live++
				listed[ref] = row.Index
			}
		}
		if live != row.Live || live == 0 || 2*live < len(row.Refs) {
			t.Fatalf("%s: row %d counts %d live of %d refs; %d are", when, row.Index, row.Live, len(row.Refs), live)
		}
	}
	for ref, v := range byKey {
		if v.ModifyIndex != 0 && listed[ref] != v.ModifyIndex {
			t.Fatalf("%s: volume %v at index %d is not in its row", when, ref, v.ModifyIndex)
		}
	}
	byIndex := slices.Clone(all) // key order
	slices.SortStableFunc(byIndex, func(a, b *structs.Volume) int { return cmp.Compare(a.ModifyIndex, b.ModifyIndex) })
	// Every boundary: each index a volume has, and the one below it.
	sinces := []uint64{0, s.LatestIndex()}
	for _, v := range all {
		sinces = append(sinces, v.ModifyIndex, max(v.ModifyIndex, 1)-1)
	}
	slices.Sort(sinces)
	for _, since := range slices.Compact(sinces) {
		var want []*structs.Volume
		for _, v := range byIndex {
			if v.ModifyIndex > since {
				want = append(want, v)
			}
		}
		got, err := snap.VolumesModifiedSince(nil, since)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s: volumes modified since %d: %s, a scan says %s", when, since, volumeKeys(got), volumeKeys(want))
		}
	}
}

func volumeKeys(vols []*structs.Volume) string {
	var b strings.Builder
	for _, v := range vols {
		fmt.Fprintf(&b, "%s@%d ", v.ID, v.ModifyIndex)
	}
	return b.String()
}

// Random volume writes (registrations of several volumes at once, claims,
// claim removals, GC bumps of several volumes, allocs turning terminal,
// deregistrations, refused requests) keep the volume_mods rows exact, and
// so do a restore and an import of the state, after which the writes go
// on. A row that missed a volume, a live count off by one, or stale refs
// piling up fail it.
func TestVolumeModsFollowWrites(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 17))
			f := newEmpty(t)
			f.must(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "ebs", Provider: "ebs.csi.example",
				ControllerEndpoint: "tcp://127.0.0.1:9000", Capabilities: structs.ControllerCapabilities{PublishUnpublish: true}}})
			f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n1", Status: structs.NodeReady, LastSeen: t0,
				Plugins: map[string]*structs.NodePlugin{"ebs": {PluginID: "ebs", Endpoint: "unix:///run/csi.sock", ExternalNodeID: "i-n1"}}}})
			allocs := 0
			newAlloc := func() string {
				allocs++
				id := fmt.Sprintf("a%03d", allocs)
				f.must(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{{ID: id, Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning}}})
				return id
			}
			vol := func(i int) string { return fmt.Sprintf("v%02d", i) }
			const pool = 24
			for step := range 300 {
				switch op := rng.IntN(8); op {
				case 7: // a release checkpoint of one claim: moves it, or frees it
					i := rng.IntN(pool)
					ns := []string{"default", "other"}[i%2]
					if v := f.volume(ns, vol(i)); v != nil {
						for _, c := range v.Claims {
							c = c.Copy()
							free := rng.IntN(2) == 0
							c.State = structs.ClaimNodeDetached
							if free {
								c.State = structs.ClaimControllerDetached
							}
							f.apply(structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{Namespace: ns, VolumeID: vol(i), Claim: c, Free: free})
							break
						}
					}
				case 0: // register a few (some may exist: refused whole)
					var vols []*structs.Volume
					for range 1 + rng.IntN(5) {
						i := rng.IntN(pool)
						vols = append(vols, &structs.Volume{Namespace: []string{"default", "other"}[i%2], ID: vol(i), ExternalID: "d-" + vol(i),
							PluginID: "ebs", AccessMode: structs.AccessMultiNodeMultiWrite, AttachmentMode: structs.AttachFilesystem})
					}
					f.apply(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols})
				case 1: // claim
					i := rng.IntN(pool)
					f.apply(structs.VolumeClaimType, &structs.VolumeClaimRequest{Namespace: []string{"default", "other"}[i%2], VolumeID: vol(i),
						Claim: &structs.Claim{AllocID: newAlloc(), NodeID: "n1", Mode: structs.ClaimWrite, State: []structs.ClaimState{structs.ClaimTaken, structs.ClaimPublishing}[rng.IntN(2)]}})
				case 2: // remove the claims of one volume
					i := rng.IntN(pool)
					ns := []string{"default", "other"}[i%2]
					if v := f.volume(ns, vol(i)); v != nil {
						for a, c := range v.Claims {
							f.apply(structs.VolumeClaimRemoveType, &structs.VolumeClaimRemoveRequest{Namespace: ns, VolumeID: vol(i), AllocID: a, ModifyIndex: c.ModifyIndex})
						}
					}
				case 3: // one GC entry bumping several volumes
					var refs []structs.VolumeRef
					for range 1 + rng.IntN(6) {
						i := rng.IntN(pool)
						refs = append(refs, structs.VolumeRef{Namespace: []string{"default", "other"}[i%2], ID: vol(i)})
					}
					f.apply(structs.ClaimGCType, &structs.ClaimGCRequest{Volumes: refs})
				case 4: // an alloc turning terminal bumps what it holds
					if allocs > 0 {
						a := f.alloc(fmt.Sprintf("a%03d", 1+rng.IntN(allocs))).Copy()
						a.ClientStatus = structs.AllocComplete
						f.apply(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{a}})
					}
				case 5: // deregister, forced or not
					i := rng.IntN(pool)
					f.apply(structs.VolumeDeregisterType, &structs.VolumeDeregisterRequest{Namespace: []string{"default", "other"}[i%2], VolumeID: vol(i),
						Force: rng.IntN(2) == 0, Reason: "operator", Time: t0})
				case 6: // restore or import the state, then go on
					var buf bytes.Buffer
					if err := f.s.Persist(&buf); err != nil {
						t.Fatal(err)
					}
					before := f.digest()
					if rng.IntN(2) == 0 {
						if err := f.s.Restore(&buf); err != nil {
							t.Fatal(err)
						}
					} else {
						f.s = importStream(t, buf.Bytes())
					}
					if got := f.digest(); got != before {
						t.Fatalf("step %d: digest %s after a restore, %s before", step, got, before)
					}
				}
				checkVolumeMods(t, f.s, fmt.Sprintf("step %d", step))
			}
		})
	}
}

// importStream builds a store from a Persist stream through the import
// Builder (as `volhost state import` does), row by row.
func importStream(t *testing.T, stream []byte) *Store {
	t.Helper()
	b := NewBuilder()
	for i, line := range bytes.Split(bytes.TrimSpace(stream), []byte("\n"))[1:] {
		table, row, _, err := decodeLine(line, newInterner())
		if err != nil {
			t.Fatalf("line %d: %v", i+2, err)
		}
		if err := b.Add(table, row); err != nil {
			t.Fatalf("line %d: %v", i+2, err)
		}
	}
	return b.Store()
}

// A stream with volume rows out of order (the restore recounts from the
// table) still gives exact rows.
func TestVolumeModsRestoreUnordered(t *testing.T) {
	f := richFixture(t)
	s := NewStore()
	if err := s.Restore(strings.NewReader(withReversedVolumeRows(t, f.s))); err != nil {
		t.Fatal(err)
	}
	checkVolumeMods(t, s, "unordered rows")
	checkVolumeMods(t, f.s, "the original")
}

// A single write to one volume of a large registration leaves a blocking
// query reading that volume alone, and the registration's row is
// compacted, not left to grow stale, once most of its volumes move on.
func TestVolumeModsReadIsProportional(t *testing.T) {
	s := bulkLoad(t, scaleShape{volumes: 3000, claimed: 0, releasable: 0})
	mark := s.LatestIndex()
	if _, err := s.ApplyAt(mark+1, t0, structs.ClaimGCType, &structs.ClaimGCRequest{Volumes: []structs.VolumeRef{{Namespace: "default", ID: "vol-0000007"}}}); err != nil {
		t.Fatal(err)
	}
	got, err := s.Snapshot().VolumesModifiedSince(nil, mark)
	if err != nil || len(got) != 1 || got[0].ID != "vol-0000007" {
		t.Fatalf("modified since %d: %s %v", mark, volumeKeys(got), err)
	}
	// Move 600 of the first registration's 1,000 volumes on, in one entry.
	var refs []structs.VolumeRef
	for j := range 600 {
		refs = append(refs, structs.VolumeRef{Namespace: "default", ID: fmt.Sprintf("vol-%07d", j)})
	}
	if _, err := s.ApplyAt(mark+2, t0, structs.ClaimGCType, &structs.ClaimGCRequest{Volumes: refs}); err != nil {
		t.Fatal(err)
	}
	first, _ := s.Snapshot().VolumeByID(nil, "default", "vol-0000999")
	row, err := volumeModsAt(s.Snapshot().txn, first.ModifyIndex)
	if err != nil || row == nil {
		t.Fatalf("no row for index %d: %v", first.ModifyIndex, err)
	}
	if row.Live != 400 || len(row.Refs) != 400 {
		t.Fatalf("registration row: %d live of %d refs, want 400 of 400 (compacted)", row.Live, len(row.Refs))
	}
	checkVolumeMods(t, s, "after the writes")
}

// The hex keys sort as the numbers do (the order memdb's UintFieldIndex
// gives, which LowerBound and Last on events and volume_mods rely on),
// and a lookup argument gives the stored key.
func TestHexUintIndexOrder(t *testing.T) {
	x := hexUint(func(r *volumeModsRow) uint64 { return r.Index })
	vals := []uint64{0, 1, 9, 10, 15, 16, 255, 256, 1 << 32, 1<<63 + 5, ^uint64(0)}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		vals = append(vals, rng.Uint64()>>rng.IntN(64))
	}
	for _, a := range vals {
		ok, ka, err := x.FromObject(&volumeModsRow{Index: a})
		if !ok || err != nil || len(ka) != 16 {
			t.Fatalf("%d: (%v, %q, %v)", a, ok, ka, err)
		}
		if arg, err := x.FromArgs(a); err != nil || !bytes.Equal(arg, ka) {
			t.Fatalf("%d: argument key %q, stored key %q (%v)", a, arg, ka, err)
		}
		for _, b := range vals {
			_, kb, _ := x.FromObject(&volumeModsRow{Index: b})
			if got, want := bytes.Compare(ka, kb), cmp.Compare(a, b); got != want {
				t.Fatalf("keys of %d and %d compare %d, the numbers %d", a, b, got, want)
			}
		}
	}
	if _, err := x.FromArgs(-1); err == nil {
		t.Error("a signed argument was accepted")
	}
	if _, _, err := x.FromObject(&eventRow{}); err == nil {
		t.Error("an event was indexed as a volume_mods row")
	}
}

// A volume registered with empty maps and mount flags is stored with nil
// ones, and its JSON (persisted and served) is byte for byte what the
// same volume without them gives; a restore reads it back alike.
func TestRegisterDropsEmptyMaps(t *testing.T) {
	f := newFixture(t)
	spec := func(id string) *structs.Volume {
		return &structs.Volume{Namespace: "default", ID: id, ExternalID: "d-" + id, PluginID: "ebs",
			AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem}
	}
	empty := spec("empty-maps")
	empty.Secrets, empty.Parameters, empty.Context, empty.MountFlags = map[string]string{}, map[string]string{}, map[string]string{}, []string{}
	plain := spec("nil-maps")
	f.must(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{empty}})
	f.must(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{plain}})
	a, b := f.volume("default", "empty-maps"), f.volume("default", "nil-maps")
	if a.Secrets != nil || a.Parameters != nil || a.Context != nil || a.MountFlags != nil {
		t.Fatalf("empty maps kept: %+v", a)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	want := strings.NewReplacer("nil-maps", "empty-maps", "d-nil-maps", "d-empty-maps").Replace(string(jb))
	want = strings.Replace(want, fmt.Sprintf(`"modify_index":%d`, b.ModifyIndex), fmt.Sprintf(`"modify_index":%d`, a.ModifyIndex), 1)
	want = strings.Replace(want, fmt.Sprintf(`"create_index":%d`, b.CreateIndex), fmt.Sprintf(`"create_index":%d`, a.CreateIndex), 1)
	if string(ja) != want {
		t.Fatalf("JSON of the volume registered with empty maps:\n%s\nwant\n%s", ja, want)
	}
	// A non-empty map stays.
	withSecret := spec("secret")
	withSecret.Secrets = map[string]string{"k": "v"}
	f.must(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{withSecret}})
	if got := f.volume("default", "secret").Secrets; got["k"] != "v" {
		t.Fatalf("secrets %v", got)
	}
	var buf bytes.Buffer
	if err := f.s.Persist(&buf); err != nil {
		t.Fatal(err)
	}
	before := f.digest()
	if err := f.s.Restore(&buf); err != nil || f.digest() != before {
		t.Fatalf("restore: %v, digest changed %v", err, f.digest() != before)
	}
}

// The claims table keys a row by alloc, then volume (the primary key), and
// by node, then volume, then alloc, each element ended by a zero byte.
func TestClaimRowKeys(t *testing.T) {
	r := &claimRow{AllocID: "a1", NodeID: "n1", Volume: structs.VolumeRef{Namespace: "default", ID: "v"}}
	for _, tc := range []struct {
		byNode bool
		want   string
	}{{false, "a1\x00default\x00v\x00"}, {true, "n1\x00default\x00v\x00a1\x00"}} {
		ok, key, err := claimRowIndexer{byNode: tc.byNode}.FromObject(r)
		if !ok || err != nil || string(key) != tc.want {
			t.Errorf("byNode %v: (%v, %q, %v), want %q", tc.byNode, ok, key, err, tc.want)
		}
	}
	// Through the store: a volume with two claims on one node is listed once.
	f := newEmpty(t)
	f.must(structs.PluginUpsertType, &structs.PluginUpsertRequest{Plugin: &structs.Plugin{ID: "ebs", Provider: "ebs.csi.example"}})
	f.must(structs.NodeUpsertType, &structs.NodeUpsertRequest{Node: &structs.Node{ID: "n1", Status: structs.NodeReady, LastSeen: t0,
		Plugins: map[string]*structs.NodePlugin{"ebs": {PluginID: "ebs", Endpoint: "unix:///run/csi.sock", ExternalNodeID: "i-n1"}}}})
	f.must(structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: []*structs.Alloc{
		{ID: "a1", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning},
		{ID: "a2", Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning}}})
	f.must(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: []*structs.Volume{{Namespace: "default", ID: "shared", ExternalID: "d",
		PluginID: "ebs", AccessMode: structs.AccessMultiNodeMultiWrite, AttachmentMode: structs.AttachFilesystem}}})
	f.claim("shared", "a1", structs.ClaimWrite)
	f.claim("shared", "a2", structs.ClaimWrite)
	onNode, err := f.s.Snapshot().VolumesClaimedOnNode(nil, "n1")
	if err != nil || len(onNode) != 1 {
		t.Fatalf("claimed on n1: %d volumes, %v; want the one", len(onNode), err)
	}
	byAlloc, err := f.s.Snapshot().VolumesClaimedByAlloc(nil, "a2")
	if err != nil || len(byAlloc) != 1 || byAlloc[0].ID != "shared" {
		t.Fatalf("claimed by a2: %v %v", byAlloc, err)
	}
}
