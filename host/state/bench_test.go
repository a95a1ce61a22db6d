package state

import (
	"fmt"
	"testing"

	"github.com/volhost/volhost/host/structs"
)

// benchStore registers n volumes, 1,000 per raft entry, then bumps `moved`
// of them in one GC entry. Each volume has its own disk: registration
// refuses a second volume on one (one disk, one volume).
func benchStore(b *testing.B, n, moved int) (*fixture, uint64) {
	b.Helper()
	f := newFixture(b)
	for i := 0; i < n; i += 1000 {
		vols := make([]*structs.Volume, 0, 1000)
		for j := i; j < i+1000 && j < n; j++ {
			vols = append(vols, &structs.Volume{Namespace: "bench", ID: fmt.Sprintf("vol-%06d", j), ExternalID: fmt.Sprintf("disk-%06d", j), PluginID: "ebs",
				AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem})
		}
		f.must(structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols})
	}
	mark := f.idx
	refs := make([]structs.VolumeRef, moved)
	for i := range refs {
		refs[i] = structs.VolumeRef{Namespace: "bench", ID: fmt.Sprintf("vol-%06d", i*(n/moved))}
	}
	f.must(structs.ClaimGCType, &structs.ClaimGCRequest{Volumes: refs})
	return f, mark
}

// BenchmarkVolumesModifiedSince: 100,000 volumes, 10 moved since the mark.
// The LowerBound read costs what it returns; the full-scan baseline is what
// a watcher without the modify_index index would pay.
func BenchmarkVolumesModifiedSince(b *testing.B) {
	f, mark := benchStore(b, 100000, 10)
	snap := f.s.Snapshot()
	b.Run("index", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			vols, err := snap.VolumesModifiedSince(nil, mark)
			if err != nil || len(vols) != 10 {
				b.Fatalf("%d volumes, %v", len(vols), err)
			}
		}
	})
	b.Run("full-scan-baseline", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			all, err := snap.Volumes(nil)
			if err != nil {
				b.Fatal(err)
			}
			n := 0
			for _, v := range all {
				if v.ModifyIndex > mark {
					n++
				}
			}
			if n != 10 {
				b.Fatalf("%d moved", n)
			}
		}
	})
}
