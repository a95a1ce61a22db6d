package cluster

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/volhost/volhost/host/structs"
	"github.com/volhost/volhost/internal/testutil"
)

// BenchmarkCheckpointGroupCommit compares, in one process and
// on one server with raft-boltdb on disk, the watcher's release writes
// (three checkpoints per claim: node-detached, controller-detached,
// ready-to-free) from 16 concurrent writers committed one raft entry per
// checkpoint (Cluster.Apply, as before the batcher) and group-committed
// (ClaimWriter.CheckpointClaim). The sides alternate over 5 rounds (A, B,
// A, B, ...), each on claims of its own; reported: each side's process
// CPU per checkpoint, checkpoints/s and raft entries per checkpoint, and
// the per-round ratios' median with min and max.
//
//	go test -run '^$' -bench CheckpointGroupCommit -benchtime 1x ./host/cluster/
//
// VOLHOST_GROUPCOMMIT_OUT=FILE writes the table as markdown.
func BenchmarkCheckpointGroupCommit(b *testing.B) {
	const rounds, claims = 5, 400
	tc := newCluster(b, 1, b.TempDir())
	l := tc.leader()
	loadBase(b, l.c)
	ctx := testCtx(b)
	term := l.c.ReadyTerm()
	batch := 0
	// prepare registers claims volumes, claims them and completes their
	// allocs (untimed); it returns the volume IDs.
	prepare := func() []string {
		batch++
		var vols []*structs.Volume
		var allocs []*structs.Alloc
		ids := make([]string, claims)
		for i := range claims {
			ids[i] = fmt.Sprintf("g%d-%d", batch, i)
			vols = append(vols, &structs.Volume{Namespace: "default", ID: ids[i], ExternalID: "d-" + ids[i],
				PluginID: "ebs", AccessMode: structs.AccessSingleNodeWriter, AttachmentMode: structs.AttachFilesystem})
			allocs = append(allocs, &structs.Alloc{ID: "a-" + ids[i], Namespace: "default", NodeID: "n1", ClientStatus: structs.AllocRunning})
		}
		mustApply(b, l.c, structs.VolumeRegisterType, &structs.VolumeRegisterRequest{Volumes: vols})
		mustApply(b, l.c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: allocs})
		for _, id := range ids {
			cl := claimReq(id, "a-"+id, "n1")
			cl.Term = term
			mustApply(b, l.c, structs.VolumeClaimType, cl)
		}
		for _, a := range allocs {
			a.ClientStatus = structs.AllocComplete
		}
		mustApply(b, l.c, structs.AllocUpsertType, &structs.AllocUpsertRequest{Allocs: allocs})
		return ids
	}
	type sideT struct {
		name  string
		write func(*structs.ClaimCheckpointRequest) error
		cpu   []float64 // us per checkpoint, by round
		rate  []float64 // checkpoints/s
		ents  []float64 // raft entries per checkpoint
	}
	w := l.c.ClaimWriter()
	sides := []*sideT{
		{name: "one entry per checkpoint", write: func(r *structs.ClaimCheckpointRequest) error {
			_, _, err := l.c.Apply(ctx, structs.ClaimCheckpointType, r)
			return err
		}},
		{name: "group commit", write: func(r *structs.ClaimCheckpointRequest) error {
			_, err := w.CheckpointClaim(ctx, r)
			return err
		}},
	}
	for b.Loop() {
		for range rounds {
			for _, s := range sides {
				ids := prepare()
				idx0, cpu0, start := l.c.LastIndex(), processCPU(b), time.Now()
				err := testutil.FanOut(benchWriters, claims, func(i int) error {
					for _, st := range []structs.ClaimState{structs.ClaimNodeDetached, structs.ClaimControllerDetached, structs.ClaimReadyToFree} {
						c := claimReq(ids[i], "a-"+ids[i], "n1").Claim
						c.State = st
						if err := s.write(&structs.ClaimCheckpointRequest{Namespace: "default", VolumeID: ids[i], Claim: c, Term: term}); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatalf("%s: %v", s.name, err)
				}
				n := float64(3 * claims)
				s.cpu = append(s.cpu, float64((processCPU(b)-cpu0).Microseconds())/n)
				s.rate = append(s.rate, n/time.Since(start).Seconds())
				s.ents = append(s.ents, float64(l.c.LastIndex()-idx0)/n)
			}
		}
	}
	spread := func(xs []float64) string { return testutil.SpreadOf(xs).String() }
	cpuRatio := testutil.Ratios(sides[1].cpu, sides[0].cpu)
	rateRatio := testutil.Ratios(sides[1].rate, sides[0].rate)
	var md strings.Builder
	fmt.Fprintf(&md, "%d rounds, %d claims x 3 checkpoints per side and round, %d writers.\n\n", rounds, claims, benchWriters)
	md.WriteString("| side | process CPU per checkpoint (us) | checkpoints/s | raft entries per checkpoint |\n| --- | ---: | ---: | ---: |\n")
	for _, s := range sides {
		fmt.Fprintf(&md, "| %s | %s | %s | %s |\n", s.name, spread(s.cpu), spread(s.rate), spread(s.ents))
	}
	fmt.Fprintf(&md, "\ngroup commit / one entry per checkpoint, per round: CPU per checkpoint %s, throughput %s\n", spread(cpuRatio), spread(rateRatio))
	b.ReportMetric(testutil.SpreadOf(cpuRatio).Median, "cpu-ratio")
	b.ReportMetric(testutil.SpreadOf(rateRatio).Median, "throughput-ratio")
	b.ReportMetric(testutil.SpreadOf(sides[1].cpu).Median, "group-cpu-us/checkpoint")
	b.ReportMetric(testutil.SpreadOf(sides[0].cpu).Median, "single-cpu-us/checkpoint")
	writeBenchMarkdown(b, "VOLHOST_GROUPCOMMIT_OUT", md.String())
}

// processCPU is the user and system CPU time the process has used.
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
