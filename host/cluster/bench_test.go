package cluster

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
)

// benchWriters is how many claim writers run at once: the watcher's
// default max_concurrency (16 volumes released in parallel).
const benchWriters = 16

// BenchmarkClaimTransitions measures write throughput through raft with
// raft-boltdb on disk: claim transitions (taken, node-detached,
// controller-detached, ready-to-free) per second, with benchWriters
// concurrent writers, on one server and on three (in-memory transports, so
// the difference is replication and quorum commit, not the network).
func BenchmarkClaimTransitions(b *testing.B) {
	for _, servers := range []int{1, 3} {
		b.Run(fmt.Sprintf("servers=%d", servers), func(b *testing.B) {
			dirs := make([]string, servers)
			for i := range dirs {
				dirs[i] = b.TempDir()
			}
			tc := newCluster(b, servers, dirs...)
			l := tc.leader()
			loadBase(b, l.c)
			claims := b.N/4 + 1
			var vols []*structs.Volume
			var allocs []*structs.Alloc
			for i := range claims {
				vols = append(vols, &structs.Volume{Namespace: "default", ID: fmt.Sprintf("bv-%d", i), ExternalID: fmt.Sprintf("bd-%d", i),
					PluginID: "ebs", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem})
				allocs = append(allocs, &structs.Alloc{ID: fmt.Sprintf("ba-%d", i), Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning})
			}
			mustApply(b, l.c, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols})
			mustApply(b, l.c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: allocs})

			run := func(fn func(i int) error) {
				var wg sync.WaitGroup
				errs := make(chan error, benchWriters)
				for w := range benchWriters {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := w; i < claims; i += benchWriters {
							if err := fn(i); err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			}
			ctx := testCtx(b)
			b.ResetTimer()
			start := time.Now()
			run(func(i int) error {
				_, _, err := l.c.Apply(ctx, structs.VolumeClaimType, claimReq(fmt.Sprintf("bv-%d", i), fmt.Sprintf("ba-%d", i), "n1"))
				return err
			})
			claimed := time.Since(start)
			b.StopTimer()
			for i := range allocs {
				allocs[i].ClientStatus = structs.AllocComplete
			}
			mustApply(b, l.c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: allocs})
			b.StartTimer()
			start = time.Now()
			for _, st := range []structs.ClaimState{structs.ClaimNodeDetached, structs.ClaimControllerDetached, structs.ClaimReadyToFree} {
				run(func(i int) error {
					c := claimReq(fmt.Sprintf("bv-%d", i), fmt.Sprintf("ba-%d", i), "n1").Claim
					c.State = st
					_, _, err := l.c.Apply(ctx, structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{
						Namespace: "default", VolumeID: fmt.Sprintf("bv-%d", i), Claim: c})
					return err
				})
			}
			elapsed := claimed + time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(4*claims)/elapsed.Seconds(), "transitions/s")
		})
	}
}
