package cluster

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
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
		name  string
		c     *Cluster
		round int // rounds run, naming each round's volumes
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
	write := func(fn func(i int) error) {
		if err := testutil.FanOut(benchWriters, claims, fn); err != nil {
			b.Fatal(err)
		}
	}
	// round registers claims volumes and their allocs (untimed), then
	// times the four transitions of each claim; the allocs' completion
	// between the claim and the release is untimed too. It answers the
	// transitions per second.
	round := func(s *sideT) float64 {
		s.round++
		vol := func(i int) string { return fmt.Sprintf("bv%d-%d", s.round, i) }
		alloc := func(i int) string { return fmt.Sprintf("ba%d-%d", s.round, i) }
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
		write(func(i int) error {
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
			write(func(i int) error {
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
	var rates [][]float64 // by side, by round
	for b.Loop() {
		rates = testutil.Interleave(rounds,
			func() float64 { return round(sides[0]) },
			func() float64 { return round(sides[1]) })
	}
	one, three := testutil.SpreadOf(rates[0]), testutil.SpreadOf(rates[1])
	ratio := testutil.SpreadOf(testutil.Ratios(rates[1], rates[0]))
	var md strings.Builder
	fmt.Fprintf(&md, "%d rounds, %d claims x 4 transitions per side and round, %d writers.\n\n", rounds, claims, benchWriters)
	md.WriteString("| servers | claim transitions/s: median [min-max] |\n| --- | ---: |\n")
	fmt.Fprintf(&md, "| %s | %s |\n", sides[0].name, one.Text("%.0f"))
	fmt.Fprintf(&md, "| %s (in-memory transports, three bolt logs on one disk) | %s |\n", sides[1].name, three.Text("%.0f"))
	fmt.Fprintf(&md, "\nthree servers / one, per round: %s\n", ratio.Text("%.2f"))
	b.ReportMetric(one.Median, "1-server-transitions/s")
	b.ReportMetric(three.Median, "3-server-transitions/s")
	b.ReportMetric(ratio.Median, "3/1-ratio")
	writeBenchMarkdown(b, "VOLHOST_CLUSTER_OUT", md.String())
}

// writeBenchMarkdown logs a benchmark's markdown table and writes it to the
// file the environment variable env names, if any (make bench).
func writeBenchMarkdown(b *testing.B, env, md string) {
	b.Logf("\n%s", md)
	if out := os.Getenv(env); out != "" {
		if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
