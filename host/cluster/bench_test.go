package cluster

import (
	"fmt"
	"os"
	"slices"
	"strings"
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
// controller-detached, ready-to-free, one raft entry each) per second with
// benchWriters concurrent writers, on one server and on three (in-memory
// transports, so the difference is replication and quorum commit, not the
// network). Both clusters live in one process and take turns (one server,
// three servers, one, three, ...) over 5 rounds of 400 claims each, each
// round on volumes of its own; reported: each side's median over the
// rounds with min and max, and the per-round ratio three / one.
//
//	go test -run '^$' -bench '^BenchmarkClaimTransitions$' -benchtime 1x ./host/cluster/
//
// VOLHOST_CLUSTER_OUT=FILE writes the table as markdown (make bench).
func BenchmarkClaimTransitions(b *testing.B) {
	const rounds, claims = 5, 400
	type sideT struct {
		name    string
		c       *Cluster
		batches int
		rate    []float64 // transitions/s, by round
	}
	var sides []*sideT
	for _, servers := range []int{1, 3} {
		dirs := make([]string, servers)
		for i := range dirs {
			dirs[i] = b.TempDir()
		}
		l := newCluster(b, servers, dirs...).leader()
		loadBase(b, l.c)
		name := "1 server"
		if servers > 1 {
			name = fmt.Sprintf("%d servers", servers)
		}
		sides = append(sides, &sideT{name: name, c: l.c})
	}
	ctx := testCtx(b)
	run := func(fn func(i int) error) { fanOut(b, claims, fn) }
	// round registers claims volumes and their allocs (untimed), then
	// times the four transitions of each claim; the allocs' completion
	// between the claim and the release is untimed too.
	round := func(s *sideT) float64 {
		s.batches++
		vol := func(i int) string { return fmt.Sprintf("bv%d-%d", s.batches, i) }
		alloc := func(i int) string { return fmt.Sprintf("ba%d-%d", s.batches, i) }
		var vols []*structs.Volume
		var allocs []*structs.Alloc
		for i := range claims {
			vols = append(vols, &structs.Volume{Namespace: "default", ID: vol(i), ExternalID: "bd-" + vol(i),
				PluginID: "ebs", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem})
			allocs = append(allocs, &structs.Alloc{ID: alloc(i), Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning})
		}
		mustApply(b, s.c, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols})
		mustApply(b, s.c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: allocs})
		start := time.Now()
		run(func(i int) error {
			_, _, err := s.c.Apply(ctx, structs.VolumeClaimType, claimReq(vol(i), alloc(i), "n1"))
			return err
		})
		elapsed := time.Since(start)
		for _, a := range allocs {
			a.ClientStatus = structs.AllocComplete
		}
		mustApply(b, s.c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: allocs})
		start = time.Now()
		for _, st := range []structs.ClaimState{structs.ClaimNodeDetached, structs.ClaimControllerDetached, structs.ClaimReadyToFree} {
			run(func(i int) error {
				c := claimReq(vol(i), alloc(i), "n1").Claim
				c.State = st
				_, _, err := s.c.Apply(ctx, structs.ClaimCheckpointType, &structs.ClaimCheckpointRequest{
					Namespace: "default", VolumeID: vol(i), Claim: c})
				return err
			})
		}
		elapsed += time.Since(start)
		return float64(4*claims) / elapsed.Seconds()
	}
	for b.Loop() {
		for range rounds {
			for _, s := range sides {
				s.rate = append(s.rate, round(s))
			}
		}
	}
	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	spread := func(format string, xs []float64) string {
		return fmt.Sprintf(format+" ["+format+"-"+format+"]", med(xs), slices.Min(xs), slices.Max(xs))
	}
	ratios := make([]float64, len(sides[0].rate))
	for i := range ratios {
		ratios[i] = sides[1].rate[i] / sides[0].rate[i]
	}
	var md strings.Builder
	fmt.Fprintf(&md, "%d rounds, %d claims x 4 transitions per side and round, %d writers.\n\n", len(ratios), claims, benchWriters)
	md.WriteString("| servers | claim transitions/s: median [min-max] |\n| --- | ---: |\n")
	fmt.Fprintf(&md, "| %s | %s |\n", sides[0].name, spread("%.0f", sides[0].rate))
	fmt.Fprintf(&md, "| %s (in-memory transports, three bolt logs on one disk) | %s |\n", sides[1].name, spread("%.0f", sides[1].rate))
	fmt.Fprintf(&md, "\nthree servers / one, per round: %s\n", spread("%.2f", ratios))
	b.ReportMetric(med(sides[0].rate), "1-server-transitions/s")
	b.ReportMetric(med(sides[1].rate), "3-server-transitions/s")
	b.ReportMetric(med(ratios), "3/1-ratio")
	b.Logf("\n%s", md.String())
	if out := os.Getenv("VOLHOST_CLUSTER_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(md.String()), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// fanOut runs fn(i) for i in [0, n) from benchWriters goroutines (writer w
// takes w, w+benchWriters, ...) and fails tb with the first error once all
// have ended.
func fanOut(tb testing.TB, n int, fn func(i int) error) {
	var wg sync.WaitGroup
	errs := make(chan error, benchWriters)
	for w := range benchWriters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += benchWriters {
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
		tb.Fatal(err)
	}
}
